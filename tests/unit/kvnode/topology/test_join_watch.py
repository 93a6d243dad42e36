"""kvnode.topology.join_watch: when the claimant undoes a join that never comes, look by look and crash
point by crash point (pure; tests/unit/kvnode/cluster/test_join_watcher.py drives it in-process,
tests/cluster/test_join_undo.py with real nodes)."""

from __future__ import annotations

import pytest

from kvnode.topology.join_watch import Verdict, Watch, verdict, watch_for
from kvnode.topology.membership import Membership

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"
JOINING = Membership.seeded([A, B, C]).with_joining(D)
TIMEOUT_S, GAP_S = 10.0, 5.0


def verdicts(looks: list[tuple[float, bool]], watch: Watch | None = None) -> list[Verdict]:
    """The verdict after each look (at a time, hearing from the joiner or not) of the claimant A."""
    seen = []
    for now, heard in looks:
        watch = watch_for(JOINING, A, watch)
        assert watch is not None
        watch = watch.looked(heard, now, GAP_S)
        seen.append(verdict(watch, TIMEOUT_S))
    return seen


def silent(start: float, end: float) -> list[tuple[float, bool]]:
    """A look a second from ``start`` to ``end`` included, none of which hears from the joiner."""
    return [(float(t), False) for t in range(int(start), int(end) + 1)]


def test_a_joiner_silent_for_the_timeout_is_undone_at_the_look_that_completes_it() -> None:
    assert verdicts(silent(100, 110)) == [Verdict.LOOK] * 10 + [Verdict.UNDO]


def test_a_joiner_heard_at_any_look_starts_the_silence_over() -> None:
    """A joiner that streams, however slowly, answers its channel: it is heard, and never undone."""
    heard_now_and_then = [(float(t), t % 9 == 0) for t in range(0, 100)]
    assert Verdict.UNDO not in verdicts(heard_now_and_then)
    once = [*silent(0, 8), (9.0, True), *silent(10, 19)]  # heard at 9: silent from 10, undone at 20
    assert verdicts(once)[-1] is Verdict.LOOK
    assert verdicts([*once, (20.0, False)])[-1] is Verdict.UNDO


@pytest.mark.parametrize("gap", [GAP_S + 0.1, 60.0, -1.0])
def test_a_gap_between_looks_is_not_counted_as_silence(gap: float) -> None:
    """This node was not looking (its loop stalled, it was suspended; or its clock went back): the
    silence starts over at the next look, so the undo comes later, never sooner."""
    before = silent(0, 5)
    after = [(5 + gap + t, False) for t in range(0, 11)]
    seen = verdicts([*before, *after])
    assert Verdict.UNDO not in seen[: len(before) + 10]
    assert seen[-1] is Verdict.UNDO  # the timeout, counted from the look after the gap


@pytest.mark.parametrize("crash_after", range(1, 11))
def test_a_claimant_that_crashes_at_any_look_starts_over_and_undoes_no_sooner(crash_after: int) -> None:
    """The watch is in memory only: the claimant started again watches from scratch, and undoes the join
    a whole timeout after its first look again."""
    seen = verdicts(silent(0, crash_after - 1))
    restart = float(crash_after + 30)  # it was down for a while: its monotonic clock is another's
    seen += verdicts(silent(restart, restart + TIMEOUT_S))
    assert seen == [Verdict.LOOK] * (crash_after + 10) + [Verdict.UNDO]


def test_only_the_claimant_watches_and_only_while_a_member_joins() -> None:
    start = Membership.seeded([A, B, C])
    assert [watch_for(JOINING, own, None) is None for own in (A, B, C, D)] == [False, True, True, True]
    assert watch_for(start, A, None) is None
    assert watch_for(start.with_leaving(A), B, None) is None  # a leave is no join: it goes on by itself
    assert watch_for(JOINING.settled(D), A, None) is None  # it came
    assert watch_for(JOINING.undone(D), A, None) is None  # it was undone
    assert verdict(None, TIMEOUT_S) is Verdict.NONE


def test_a_watch_of_another_version_starts_over() -> None:
    """Another join after one undone is watched from its own first look."""
    old = Watch(JOINING.version, D, last_look=50.0, silent_since=0.0)
    again = JOINING.undone(D).with_joining(D)
    watch = watch_for(again, A, old)
    assert watch == Watch(again.version, D)
    assert watch_for(JOINING, A, old) is old
