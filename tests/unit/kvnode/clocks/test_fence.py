"""kvnode.clocks.fence: which clock is off, from offsets given by hand; the fence a write consults. No I/O
(the peers' measurement is a function the test gives)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from kvnode.clocks.fence import ClockFence, ClockFenced, judge
from kvnode.clocks.offsets import ClockOffsets, Offset
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership

SKEW_US = 5_000_000
MINUTE_US = 60_000_000


def test_in_three_nodes_with_one_clock_a_minute_ahead_only_that_node_is_fenced() -> None:
    bad = judge({"b": Offset(-MINUTE_US, 400), "c": Offset(-MINUTE_US + 300, 600)}, SKEW_US)
    assert bad.fenced
    assert bad.offset_us == MINUTE_US - 300  # ahead of the cluster by a minute
    assert "this node's clock is 60.0 s ahead of the cluster's" in bad.describe()
    for other in ("c", "b"):  # each good node sees the bad one far, and the other good one near
        good = judge({"a": Offset(MINUTE_US, 500), other: Offset(120, 300)}, SKEW_US)
        assert (good.fenced, good.far, good.offset_us) == (False, ("a",), -120)  # the median's offset
        assert "the clock of a" in good.describe()


def test_in_three_nodes_with_one_clock_a_minute_behind_only_that_node_is_fenced() -> None:
    bad = judge({"b": Offset(MINUTE_US, 400), "c": Offset(MINUTE_US, 600)}, SKEW_US)
    assert (bad.fenced, bad.offset_us) == (True, -MINUTE_US)
    good = judge({"a": Offset(-MINUTE_US, 500), "c": Offset(0, 300)}, SKEW_US)
    assert (good.fenced, good.far) == (False, ("a",))


def test_no_estimate_is_no_fence_and_offsets_within_the_skew_are_none() -> None:
    assert not judge({}, SKEW_US).fenced
    near = judge({"b": Offset(SKEW_US - 1, 0), "c": Offset(-SKEW_US, 0)}, SKEW_US)
    assert (near.fenced, near.far) == (False, ())


def test_uncertainty_gives_the_benefit_of_the_doubt() -> None:
    # 5.5 s apart, give or take 1 s: maybe within the skew, so not far.
    assert judge({"b": Offset(5_500_000, 1_000_000)}, SKEW_US).far == ()
    assert judge({"b": Offset(6_500_000, 1_000_000)}, SKEW_US).far == ("b",)


def test_two_members_far_apart_cannot_tell_whose_clock_is_wrong_so_both_are_fenced() -> None:
    one = judge({"b": Offset(MINUTE_US, 100)}, SKEW_US)
    other = judge({"a": Offset(-MINUTE_US, 100)}, SKEW_US)
    assert one.fenced and other.fenced
    assert "no third member" in one.describe()


def test_five_nodes_with_one_clock_ahead_and_one_behind_fence_those_two() -> None:
    ahead = judge(
        {
            "b": Offset(-2 * MINUTE_US, 0),
            "c": Offset(-MINUTE_US, 0),
            "d": Offset(-MINUTE_US, 0),
            "e": Offset(-MINUTE_US, 0),
        },
        SKEW_US,
    )  # a is a minute ahead, b a minute behind, c, d and e right
    assert (ahead.fenced, ahead.offset_us) == (True, MINUTE_US)
    good = judge(
        {"a": Offset(MINUTE_US, 0), "b": Offset(-MINUTE_US, 0), "d": Offset(0, 0), "e": Offset(0, 0)}, SKEW_US
    )
    assert (good.fenced, good.far) == (False, ("a", "b"))


class Wall:
    def __init__(self, us: int) -> None:
        self.us = us

    def __call__(self) -> int:
        return self.us


class ClockPeer:
    """A peer whose clock measurement runs ``measure``."""

    def __init__(self, measure: Callable[[], Awaitable[None]]) -> None:
        self._measure = measure

    def measure_clock(self) -> Awaitable[None]:
        return self._measure()


async def no_measurement() -> None:
    pass


def measuring(fence: ClockFence, measure: Callable[[], Awaitable[None]]) -> None:
    """The fence runs with two peers: measuring the first runs ``measure`` (which may measure both)."""
    urls = ["http://a", "http://b", "http://c"]
    peers = {"http://b": ClockPeer(measure), "http://c": ClockPeer(no_measurement)}
    fence.use(Epoch(urls[0], Membership.seeded(urls), peers, since=0))


def fence_of(wall: Wall, peers: int = 2) -> tuple[ClockFence, list[float]]:
    now = [0.0]
    return ClockFence(wall, SKEW_US, ClockOffsets(max_age_s=10.0), peers=peers, now_s=lambda: now[0]), now


def test_records_are_judged_against_the_cluster_time_this_node_best_knows() -> None:
    wall = Wall(100 * MINUTE_US)
    fence, _ = fence_of(wall)
    assert fence.acceptable(wall.us + SKEW_US) and not fence.acceptable(wall.us + SKEW_US + 1)
    # This node runs a minute behind the others: records stamped by them now are fine...
    fence.measured("b", Offset(MINUTE_US, 100))
    fence.measured("c", Offset(MINUTE_US, 100))
    assert fence.fenced
    assert fence.acceptable(wall.us + MINUTE_US + SKEW_US)
    # ...and a minute ahead, its own stamps are refused: they are a minute ahead of the cluster.
    ahead, _ = fence_of(wall)
    ahead.measured("b", Offset(-MINUTE_US, 100))
    ahead.measured("c", Offset(-MINUTE_US, 100))
    assert not ahead.acceptable(wall.us)
    assert ahead.acceptable(wall.us - MINUTE_US)


def test_a_wall_clock_stepped_since_the_last_measurement_is_caught_by_the_next_record() -> None:
    wall = Wall(100 * MINUTE_US)
    fence, now = fence_of(wall)
    fence.measured("b", Offset(0, 100))
    fence.measured("c", Offset(0, 100))
    now[0], wall.us = 0.1, wall.us + MINUTE_US + 100_000  # a step, before any new measurement
    assert not fence.fenced
    assert not fence.acceptable(wall.us)  # this node's next stamp
    assert fence.acceptable(wall.us - MINUTE_US)  # what the others stamp now


async def test_a_write_is_refused_while_fenced_and_admitted_once_the_clock_is_back() -> None:
    wall = Wall(100 * MINUTE_US)
    fence, now = fence_of(wall)
    fence.measured("b", Offset(-MINUTE_US, 100))
    fence.measured("c", Offset(-MINUTE_US, 100))
    with pytest.raises(ClockFenced, match=r"60\.0 s ahead"):
        await fence.admit_write()
    now[0] = 1.0  # the clock is fixed: the next measurements clear the fence
    fence.measured("b", Offset(0, 100))
    fence.measured("c", Offset(0, 100))
    await fence.admit_write()
    assert not fence.fenced


async def test_an_old_fence_ages_out_when_the_peers_go_silent() -> None:
    fence, now = fence_of(Wall(0))
    fence.measured("b", Offset(0, 100))  # checked at start...
    fence.measured("c", Offset(0, 100))
    now[0] = 1.0  # ...then its clock steps a minute ahead
    fence.measured("b", Offset(-MINUTE_US, 100))
    fence.measured("c", Offset(-MINUTE_US, 100))
    assert fence.fenced
    now[0] = 12.0  # no measurement for longer than the estimates count
    await fence.admit_write()  # no estimate is no fence
    assert not fence.fenced


async def test_a_fence_that_ages_out_before_the_clock_was_ever_checked_still_refuses_writes() -> None:
    fence, now = fence_of(Wall(0))
    fence.measured("b", Offset(-MINUTE_US, 100))
    fence.measured("c", Offset(-MINUTE_US, 100))
    now[0] = 11.0
    with pytest.raises(ClockFenced, match="clock unchecked"):
        await fence.admit_write()
    assert not fence.fenced


async def test_before_any_measurement_a_write_waits_for_one_round_of_them() -> None:
    wall = Wall(0)
    fence, _ = fence_of(wall)
    rounds = itertools.count(1)

    async def measure_peers() -> None:
        next(rounds)
        await asyncio.sleep(0)
        fence.measured("b", Offset(-MINUTE_US, 100))
        fence.measured("c", Offset(-MINUTE_US, 100))

    measuring(fence, measure_peers)
    outcomes = await asyncio.gather(fence.admit_write(), fence.admit_write(), return_exceptions=True)
    assert all(isinstance(outcome, ClockFenced) for outcome in outcomes)
    assert next(rounds) == 2  # the two writes shared one round


async def test_a_node_that_reaches_no_peer_since_it_started_refuses_writes_as_unchecked() -> None:
    """Started alone, with a clock a minute ahead or not: it cannot know, so it stamps nothing that could
    beat a write acknowledged later (the contract's "an unchecked clock stamps nothing that can win")."""
    fence, _ = fence_of(Wall(0))

    async def nobody_answers() -> None:
        await asyncio.sleep(0)

    measuring(fence, nobody_answers)
    with pytest.raises(ClockFenced) as refused:
        await fence.admit_write()
    assert str(refused.value) == (
        "clock unchecked: this node has not yet checked its clock against a majority of the 3 members (1 "
        "within the maximum skew, itself included); it coordinates writes once it has (start the others, "
        "or check it reaches them)"
    )
    assert not fence.fenced and not fence.ready


async def test_a_node_checked_once_keeps_coordinating_when_its_peers_go_silent() -> None:
    """Its anchor (the cluster's time carried by the monotonic clock) judges its own stamps from then on."""
    fence, now = fence_of(Wall(0))
    fence.measured("b", Offset(0, 100))
    assert fence.checked and fence.ready  # checked by the background measurements: writes read one flag
    now[0] = 11.0

    async def nobody_answers() -> None:
        await asyncio.sleep(0)

    measuring(fence, nobody_answers)
    await fence.admit_write()
    assert not fence.ready  # no estimate left: the next write measures again first


async def test_a_cluster_of_one_member_is_checked_from_the_start() -> None:
    fence, _ = fence_of(Wall(0), peers=0)
    assert fence.ready
    await fence.admit_write()


def test_two_members_of_five_agreeing_are_not_a_check_three_are() -> None:
    fence, _ = fence_of(Wall(0), peers=4)
    fence.measured("b", Offset(0, 100))  # one bad time source for both: they agree with each other
    assert (fence.fenced, fence.checked, fence.ready) == (False, False, False)
    fence.measured("c", Offset(MINUTE_US, 100))  # c is far: still two of five within the skew
    assert (fence.verdict.agreeing, fence.checked) == (2, False)
    fence.measured("d", Offset(100, 100))
    assert (fence.verdict.agreeing, fence.checked, fence.ready) == (3, True, True)


async def test_a_good_node_that_measured_only_the_bad_one_measures_the_rest_before_refusing() -> None:
    fence, _ = fence_of(Wall(0))
    fence.measured("a", Offset(MINUTE_US, 100))
    assert fence.fenced  # a tie, for now

    async def measure_peers() -> None:
        fence.measured("c", Offset(0, 100))

    measuring(fence, measure_peers)
    await fence.admit_write()
    assert (fence.fenced, fence.verdict.far) == (False, ("a",))


async def test_a_peer_that_does_not_answer_holds_up_no_write_the_others_clear() -> None:
    fence, _ = fence_of(Wall(0))
    frozen = asyncio.get_running_loop().create_future()

    async def measure_peers() -> None:
        fence.measured("c", Offset(0, 100))  # answers at once; b never does
        await frozen

    measuring(fence, measure_peers)
    await asyncio.wait_for(fence.admit_write(), timeout=5)
    assert (fence.fenced, fence.verdict.measured) == (False, 1)
    frozen.cancel()
