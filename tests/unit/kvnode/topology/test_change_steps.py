"""kvnode.topology.change_steps: a node's part in a membership change, step by step and crash point by crash
point, for a join, a leave and a new replication factor (pure; tests/cluster/test_join.py,
tests/cluster/test_leave.py and tests/cluster/test_replication_factor.py run the same steps with real
nodes)."""

from __future__ import annotations

import pytest

from kvnode.topology.change_steps import Progress, Start, Step, next_step, start_from, walker
from kvnode.topology.membership import Membership

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"
SEEDED = Membership.seeded([A, B, C])
IN_ORDER = [Step.BARRIER, Step.DRAIN, Step.STREAM, Step.FINISH]


def walk(membership: Membership, own: str, progress: Progress, crash_after: int | None = None) -> list[Step]:
    """The steps taken from ``progress``; with ``crash_after``, the progress is lost (kept in memory only)
    once that many steps were done, and the walk goes on as a restarted node's would."""
    taken: list[Step] = []
    while (step := next_step(membership, own, progress)) is not Step.FINISH:
        assert step is not Step.NONE
        taken.append(step)
        progress = progress.after(step)
        if len(taken) == crash_after:
            progress = Progress(membership.version)
    return [*taken, Step.FINISH]


def change(kind: str) -> tuple[Membership, str, Membership]:
    """A change of ``kind`` under way, the member that walks it, and the version that ends it."""
    if kind == "join":
        return SEEDED.with_joining(D), D, SEEDED.with_joining(D).settled(D)
    if kind == "leave":
        return SEEDED.with_leaving(B), B, SEEDED.with_leaving(B).removed(B)
    resizing = SEEDED.resized(2)  # a new replication factor: the claimant, the first member, walks it
    return resizing, A, resizing.resettled()


@pytest.mark.parametrize("kind", ["join", "leave", "resize"])
def test_a_change_is_taken_step_by_step(kind: str) -> None:
    membership, own, after = change(kind)
    assert walker(membership) == own
    assert walk(membership, own, Progress(membership.version)) == IN_ORDER
    # Once the next version is the node's: nothing left to do (a member like the others, gone, or N moved).
    assert next_step(after, own, Progress(after.version)) is Step.NONE or own not in after.urls
    assert walker(after) is None


@pytest.mark.parametrize("kind", ["join", "leave", "resize"])
@pytest.mark.parametrize("crash_after", [1, 2, 3])
def test_a_crash_at_any_step_walks_every_step_again(kind: str, crash_after: int) -> None:
    """Progress is in memory only: a node started again repeats every step, each safe to repeat (a barrier
    passed again, records already there, a version the claimant already took)."""
    membership, own, _ = change(kind)
    expected = [*IN_ORDER[:crash_after], *IN_ORDER]
    assert walk(membership, own, Progress(membership.version), crash_after) == expected


def test_progress_made_for_another_version_counts_for_nothing() -> None:
    joining = SEEDED.with_joining(D)
    done = Progress(joining.version - 1, barrier=True, drained=True, streamed=True)
    assert next_step(joining, D, done) is Step.BARRIER


def test_nodes_a_change_does_not_concern_have_no_step() -> None:
    for membership in (SEEDED, SEEDED.with_joining(D), SEEDED.with_leaving(B)):
        for own in (A, C):
            assert next_step(membership, own, Progress(membership.version)) is Step.NONE
    resizing = SEEDED.resized(2)  # the claimant alone streams the new copies
    for own in (B, C):
        assert next_step(resizing, own, Progress(resizing.version)) is Step.NONE


def test_a_node_started_again_after_the_claimant_took_its_change_stores_it() -> None:
    assert start_from(SEEDED, D) is Start.CHANGE
    assert start_from(SEEDED.with_joining(D), D) is Start.STORE
    assert start_from(SEEDED.replaced(C, D), D) is Start.STORE
