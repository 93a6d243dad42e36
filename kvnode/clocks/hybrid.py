"""The node's clock: a hybrid logical clock (Kulkarni et al., 2014), the one place timestamps come from.

A timestamp is microseconds since the epoch. ``now()`` follows the wall clock but never goes backwards
and never repeats; ``observe(ts)`` moves the clock past a timestamp seen in a replica's answer or in a
replica write received, so a write made after another was acknowledged is stamped after it whatever the
offsets between the nodes' wall clocks. The logical counter of the paper is folded into the low digits
(the next microsecond), which keeps a timestamp one u64 that orders the same way.

Time is not trusted: a timestamp further ahead of the local wall clock than the maximum skew is ignored
(and counted), so one node with a wild clock cannot drag the others' clocks along with it. And the clock
never goes backwards across restarts: before handing out a timestamp past its persisted floor, it
persists a new floor a little ahead (a lease), and a restarted node starts from that floor, unless that
floor is beyond the maximum skew ahead of the wall clock: it was persisted while the clock was wrong, and
holding to it would keep the node that far ahead (docs/clock-fencing.md says why dropping it is safe).

>>> wall = [1_000]
>>> clock = HybridClock(lambda: wall[0], max_skew_us=5_000)
>>> clock.now(), clock.now()
(1000, 1001)
>>> wall[0] = 900                         # the wall clock steps back
>>> clock.now()
1002
>>> clock.observe(3_000), clock.now()     # a peer runs ahead, within the skew
(True, 3001)
>>> clock.observe(99_999)                 # beyond the skew: ignored
False
>>> HybridClock(lambda: wall[0], max_skew_us=5_000, floor=60_000).now()   # a floor from a wrong clock
900
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kvnode.figures import Figure, Figures, Kind

__all__ = ["CLOCK_FIGURES", "FLOOR_LEASE_US", "HybridClock", "wall_clock_us"]

# How far past the timestamps handed out the persisted floor runs: one small write per lease at most,
# and a restarted node starts at most this far ahead of the last timestamp it handed out.
FLOOR_LEASE_US = 250_000


def wall_clock_us(offset_ms: int = 0) -> Callable[[], int]:
    """The wall clock in microseconds, shifted by ``offset_ms`` (KVNODE_CLOCK_OFFSET_MS, a testing aid)."""
    offset_us = offset_ms * 1000

    def now() -> int:
        return time.time_ns() // 1000 + offset_us

    return now


class HybridClock:
    def __init__(
        self,
        wall_us: Callable[[], int],
        max_skew_us: int,
        floor: int = 0,
        persist_floor: Callable[[int], None] | None = None,
    ) -> None:
        self._wall_us = wall_us
        self.max_skew_us = max_skew_us
        # A floor beyond the maximum skew ahead was persisted while the clock was wrong: start afresh.
        self.dropped_floor = floor if floor - wall_us() > max_skew_us else 0
        if self.dropped_floor:
            floor = 0
        self._last = floor
        self._floor = floor
        self._persist_floor = persist_floor
        self.ignored = 0  # timestamps observed beyond the maximum skew

    def now(self) -> int:
        """A timestamp greater than every one handed out or observed before."""
        stamp = self._wall_us()
        if stamp <= self._last:
            stamp = self._last + 1
        self._last = stamp
        if stamp > self._floor and self._persist_floor is not None:
            floor = stamp + FLOOR_LEASE_US
            self._persist_floor(floor)  # if this raises, no timestamp past the persisted floor is handed out
            self._floor = floor
        return stamp

    def observe(self, timestamp: int) -> bool:
        """Move past ``timestamp`` unless it is beyond the maximum skew ahead of the wall clock (then
        count it and return False: a replica refuses such a record)."""
        if timestamp <= self._last:
            return True
        if timestamp - self._wall_us() > self.max_skew_us:
            self.ignored += 1
            return False
        self._last = timestamp
        return True

    def current(self) -> int:
        """The clock's time without handing out a timestamp: for judging (a TTL's expiry), not stamping.
        Never behind a timestamp handed out or observed, and costs no persisted floor."""
        return max(self._wall_us(), self._last)

    @property
    def lead_us(self) -> int:
        """How far the clock runs ahead of the wall clock (0 when it follows it)."""
        return max(0, self._last - self._wall_us())


# A HybridClock's figures (kvnode.figures), in /v0/stats's "clock" beside the fence's.
CLOCK_FIGURES = Figures("clock", (
    Figure("lead_us", Kind.GAUGE, "How far the hybrid clock runs ahead of the wall clock",
           "kvnode_clock_lead_seconds", key="lead_ms", micros=True),
    Figure("ignored", Kind.COUNTER, "Timestamps seen beyond the maximum clock skew, ignored by the clock",
           "kvnode_clock_ignored_timestamps", key="ignored_ahead"),
))  # fmt: skip
