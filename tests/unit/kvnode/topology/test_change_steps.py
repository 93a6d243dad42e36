"""kvnode.topology.change_steps: a membership change as typed actions, step by step and crash point by crash
point, for a join, a leave and a new replication factor; the change a membership has under way; and whom
a change is offered to first (pure; tests/unit/kvnode/cluster/test_own_part.py carries the actions out
in-process, tests/cluster/test_join.py, test_leave.py and test_replication_factor.py with real nodes)."""

from __future__ import annotations

import dataclasses

import pytest

from kvnode.topology.change_steps import (
    Action,
    AwaitPeers,
    Change,
    Drain,
    Kind,
    OfferNext,
    Progress,
    RepairWithPeers,
    Start,
    Step,
    StreamLeaving,
    StreamNewCopies,
    change_under_way,
    next_action,
    offer_order,
    start_from,
)
from kvnode.topology.membership import Membership
from kvnode.topology.placement import Placement

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"
SEEDED = Membership.seeded([A, B, C])


def shown(actions: list[Action]) -> list[tuple[object, ...]]:
    """Each action as its kind and fields, a placement as its members, tokens and N (it has no ==)."""

    def field(value: object) -> object:
        return (value.nodes, value.tokens, value.replication) if isinstance(value, Placement) else value

    return [
        (type(action).__name__, *(field(getattr(action, f.name)) for f in dataclasses.fields(action)))
        for action in actions
    ]


def walk(membership: Membership, own: str, crash_after: int | None = None) -> list[Action]:
    """The actions taken from the start; with ``crash_after``, the progress is lost (kept in memory only)
    once that many were done, and the walk goes on as a restarted node's would."""
    taken: list[Action] = []
    progress = Progress(membership.version)
    while (action := next_action(membership, own, progress)) is not None:
        taken.append(action)
        progress = progress.after(action)
        if len(taken) == crash_after:
            progress = Progress(membership.version)
    return taken


def change(kind: Kind) -> tuple[Membership, str, list[Action]]:
    """A change of ``kind`` under way, the member that walks it, and the actions it takes, in order."""
    if kind is Kind.JOIN:
        joining = SEEDED.with_joining(D)
        return joining, D, [AwaitPeers(2), Drain(), RepairWithPeers(), OfferNext(kind, joining.settled(D))]
    if kind is Kind.LEAVE:
        leaving = SEEDED.with_leaving(B)
        removed = leaving.removed(B)
        stream = StreamLeaving(SEEDED.placement(), removed.placement())
        return leaving, B, [AwaitPeers(2), Drain(), stream, OfferNext(kind, removed)]
    resizing = SEEDED.resized(2)  # a new replication factor: the claimant, the first member, walks it
    stream_copies = StreamNewCopies(SEEDED.placement(), resizing.resettled().placement())
    return resizing, A, [AwaitPeers(2), Drain(), stream_copies, OfferNext(kind, resizing.resettled())]


@pytest.mark.parametrize("kind", list(Kind))
def test_a_change_is_walked_action_by_action_by_its_walker(kind: Kind) -> None:
    membership, own, actions = change(kind)
    under_way = change_under_way(membership)
    assert under_way is not None and (under_way.kind, under_way.walker) == (kind, own)
    assert shown(walk(membership, own)) == shown(actions)
    assert [action.step for action in actions] == list(Step)
    # The version the last action offers ends the change: nothing is under way, nothing left to do.
    ending = actions[-1]
    assert isinstance(ending, OfferNext) and change_under_way(ending.plan) is None
    assert walk(ending.plan, own) == []


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("crash_after", [1, 2, 3])
def test_a_crash_at_any_step_walks_every_step_again(kind: Kind, crash_after: int) -> None:
    """Progress is in memory only: a node started again repeats every step, each safe to repeat (a barrier
    passed again, records already there, a version the claimant already took)."""
    membership, own, actions = change(kind)
    assert shown(walk(membership, own, crash_after)) == shown([*actions[:crash_after], *actions])


def test_progress_made_for_another_version_counts_for_nothing() -> None:
    joining = SEEDED.with_joining(D)
    done = Progress(joining.version - 1, done=(Step.BARRIER, Step.DRAIN, Step.STREAM))
    assert next_action(joining, D, done) == AwaitPeers(joining.version)


def test_the_progress_says_its_step_and_the_records_streamed_in_it() -> None:
    progress = Progress(2)
    assert progress.to_json() == {"version": 2, "step": "barrier", "streamed": 0}
    progress = progress.after(AwaitPeers(2)).after(Drain()).sent(64).sent(3)
    assert progress.to_json() == {"version": 2, "step": "stream", "streamed": 67}
    assert progress.after(RepairWithPeers()).after(OfferNext(Kind.JOIN, SEEDED)).step is None


def test_nodes_a_change_does_not_concern_have_no_action() -> None:
    for membership in (SEEDED, SEEDED.with_joining(D), SEEDED.with_leaving(B)):
        for own in (A, C):
            assert next_action(membership, own, Progress(membership.version)) is None
    resizing = SEEDED.resized(2)  # the claimant alone streams the new copies
    for own in (B, C):
        assert next_action(resizing, own, Progress(resizing.version)) is None


def test_the_change_under_way_names_its_kind_member_walker_and_version() -> None:
    assert change_under_way(SEEDED) is None
    assert change_under_way(SEEDED.with_leaving(C)) == Change(Kind.LEAVE, 2, C, C)
    assert change_under_way(SEEDED.resized(1)) == Change(Kind.RESIZE, 2, A)
    assert Change(Kind.RESIZE, 2, A).to_json() == {
        "kind": "replication-factor",
        "member": None,
        "walker": A,
        "version": 2,
    }


def test_every_change_made_from_one_version_is_offered_to_the_same_claimant_first() -> None:
    """So that of two changes made at once the claimant takes one and refuses the other, whoever makes
    them: the first member even when it is the one leaving (it is up: a leave needs every member)."""
    plans = [SEEDED.with_joining(D), SEEDED.with_leaving(A), SEEDED.with_leaving(C), SEEDED.resized(1)]
    for maker in (A, B, C):
        assert {offer_order(plan, maker)[0] for plan in plans} == {A}
    assert offer_order(SEEDED.with_leaving(C), B) == (A, (C,))  # the rest: every other member
    assert offer_order(SEEDED.resized(1), A) == (A, (B, C))  # the claimant makes it: it takes it first
    # A newcomer is never the claimant, even in the first member's place (that member is down).
    assert offer_order(SEEDED.replaced(A, D), D, newcomer=True) == (B, (C,))
    assert offer_order(SEEDED.with_joining(D), D, newcomer=True) == (A, (B, C))


def test_the_changes_that_end_one_are_offered_to_the_claimant_of_the_version_they_make() -> None:
    joining, leaving_first = SEEDED.with_joining(D), SEEDED.with_leaving(A)
    assert offer_order(joining.settled(D), D) == (A, (B, C))
    assert offer_order(joining.undone(D), B) == (A, (C,))
    assert offer_order(leaving_first.removed(A), A) == (B, (C,))  # the one leaving is gone from it


def test_a_node_started_again_after_the_claimant_took_its_change_stores_it() -> None:
    assert start_from(SEEDED, D) is Start.CHANGE
    assert start_from(SEEDED.with_joining(D), D) is Start.STORE
    assert start_from(SEEDED.replaced(C, D), D) is Start.STORE


def test_a_walker_streams_by_placements_that_list_its_own_datacenters_owners_first() -> None:
    """As the walker places keys (a version written to fewer than N replicas lives on a prefix of the
    order its coordinator's datacenter chose, and the walker's datacenter agrees on its own)."""
    spread = Membership.seeded([A, B, C, D], 1, datacenters=["east", "east", "west", "west"])
    leaving = spread.with_leaving(C)
    action = next_action(leaving, C, Progress(leaving.version, done=(Step.BARRIER, Step.DRAIN)))
    assert isinstance(action, StreamLeaving)
    assert (action.before.datacenters, action.after.datacenters) == (("west", "east"), ("west", "east"))
    resizing = spread.resized(2)
    copies = next_action(resizing, A, Progress(resizing.version, done=(Step.BARRIER, Step.DRAIN)))
    assert isinstance(copies, StreamNewCopies) and copies.after.datacenters == ("east", "west")
