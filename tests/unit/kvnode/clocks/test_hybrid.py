"""kvnode.clocks.hybrid: the hybrid logical clock, driven by a wall clock the test sets by hand. No I/O: its
floor
is persisted to a list, or refused as a full disk would."""

from __future__ import annotations

import itertools
import time

import pytest

from kvnode.clocks.hybrid import FLOOR_LEASE_US, HybridClock, wall_clock_us
from kvnode.storage.keyspace import StorageFull

SKEW_US = 5_000_000


class HandWall:
    """A wall clock in microseconds that the test moves itself."""

    def __init__(self, us: int) -> None:
        self.us = us

    def __call__(self) -> int:
        return self.us


def test_follows_the_wall_clock() -> None:
    wall = HandWall(1_000_000_000_123_456)
    clock = HybridClock(wall, SKEW_US)
    assert clock.now() == 1_000_000_000_123_456
    wall.us += 5_000
    assert clock.now() == 1_000_000_000_128_456
    assert clock.lead_us == 0


def test_strictly_increasing_while_the_wall_clock_stands_still() -> None:
    clock = HybridClock(HandWall(10_000), SKEW_US)
    assert [clock.now() for _ in range(1000)] == list(range(10_000, 11_000))


def test_never_goes_backwards_when_the_wall_clock_steps_back() -> None:
    wall = HandWall(50_000_000)
    clock = HybridClock(wall, SKEW_US)
    first = clock.now()
    wall.us = 10_000_000  # NTP steps the clock 40 s back
    assert [clock.now() for _ in range(10)] == list(range(first + 1, first + 11))
    wall.us = 60_000_000  # the wall clock overtakes the bumped stamps again: follow it
    assert clock.now() == 60_000_000


def test_observing_a_later_timestamp_moves_past_it() -> None:
    wall = HandWall(1_000_000)
    clock = HybridClock(wall, SKEW_US)
    clock.now()
    assert clock.observe(1_000_000 + 3_000_000)  # a peer 3 s ahead: within the skew
    assert clock.now() == 4_000_001
    assert clock.lead_us == 3_000_001
    assert clock.observe(10)  # an older timestamp changes nothing
    assert clock.now() == 4_000_002


def test_current_reads_the_clock_without_handing_out_or_persisting_a_timestamp() -> None:
    wall = HandWall(1_000_000)
    floors: list[int] = []
    clock = HybridClock(wall, SKEW_US, persist_floor=floors.append)
    assert [clock.current(), clock.current()] == [1_000_000, 1_000_000]  # the wall clock, not advanced
    assert floors == []
    assert clock.now() == 1_000_000  # current() handed nothing out
    clock.observe(3_000_000)
    assert clock.current() == 3_000_000  # never behind a timestamp observed
    wall.us = 5_000_000
    assert clock.current() == 5_000_000


def test_a_timestamp_beyond_the_maximum_skew_is_ignored_and_counted() -> None:
    wall = HandWall(1_000_000)
    clock = HybridClock(wall, SKEW_US)
    assert not clock.observe(1_000_000 + SKEW_US + 1)
    assert clock.ignored == 1
    assert clock.now() == 1_000_000  # not moved
    assert clock.observe(1_000_000 + SKEW_US)  # exactly the maximum skew is still accepted
    assert clock.ignored == 1


def test_a_floor_is_persisted_ahead_before_a_timestamp_passes_it() -> None:
    persisted: list[int] = []
    wall = HandWall(1_000_000)
    clock = HybridClock(wall, SKEW_US, floor=0, persist_floor=persisted.append)
    first = clock.now()
    assert persisted == [first + FLOOR_LEASE_US]
    wall.us += FLOOR_LEASE_US // 2
    clock.now()  # still under the floor: nothing written
    assert len(persisted) == 1
    wall.us += FLOOR_LEASE_US
    stamp = clock.now()
    assert persisted == [first + FLOOR_LEASE_US, stamp + FLOOR_LEASE_US]
    assert all(floor > stamp for floor in persisted[-1:])


def test_a_restarted_clock_starts_above_every_timestamp_handed_out_before() -> None:
    persisted: list[int] = []
    wall = HandWall(5_000_000)
    before = HybridClock(wall, SKEW_US, persist_floor=persisted.append)
    stamps = [before.now() for _ in range(100)]
    wall.us = 1_000_000  # the machine restarts with its wall clock 4 s behind
    after = HybridClock(wall, SKEW_US, floor=persisted[-1], persist_floor=persisted.append)
    assert after.now() > max(stamps)


def test_with_the_real_wall_clock_strictly_increasing_and_near_it() -> None:
    clock = HybridClock(wall_clock_us(), SKEW_US)
    stamps = [clock.now() for _ in range(50_000)]
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert abs(stamps[-1] - time.time_ns() // 1000) < 60_000_000


def test_the_offset_shifts_the_wall_clock() -> None:
    ahead, plain = wall_clock_us(1500), wall_clock_us()
    assert 1_400_000 < ahead() - plain() < 1_600_000


def test_a_floor_persisted_beyond_the_skew_ahead_is_dropped_at_start() -> None:
    """A node restarted with a good clock after running a minute ahead starts from its wall clock; a floor
    within the skew (an ordinary restart) still holds."""
    wall = HandWall(1_000_000_000_000)
    minute_ahead = HybridClock(wall, SKEW_US, floor=wall.us + 60_000_000)
    assert minute_ahead.dropped_floor == wall.us + 60_000_000
    assert minute_ahead.now() == wall.us
    ordinary = HybridClock(wall, SKEW_US, floor=wall.us + FLOOR_LEASE_US)
    assert ordinary.dropped_floor == 0
    assert ordinary.now() == wall.us + FLOOR_LEASE_US + 1


def test_a_floor_that_cannot_be_persisted_hands_out_no_timestamp_past_the_persisted_one() -> None:
    """A full disk refuses the floor: the write that needed it fails (507), and the next one tries again."""
    wall = HandWall(1_000_000_000_000_000)
    persisted: list[int] = []
    disk_full = True

    def persist(floor: int) -> None:
        if disk_full:
            raise StorageFull("disk full: No space left on device")
        persisted.append(floor)

    clock = HybridClock(wall, SKEW_US, persist_floor=persist)
    for _ in range(2):
        with pytest.raises(StorageFull):
            clock.now()
    disk_full = False
    stamp = clock.now()
    assert persisted == [stamp + FLOOR_LEASE_US]
