"""kvnode.cluster.changes: every change made the one way (the claimant first, then stored here, then the
others), with scripted members; a leave or a new replication factor refused while a member is
unreachable; and a join undone (``admin remove``), made from any member with the claimant first, refused
for a member that is not joining, and told to a joiner that still answers; every node in-process. (Whom a
change is offered to: tests/unit/kvnode/topology/test_change_steps.py; the walk that follows a leave or a
new factor: test_own_part.py.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvnode.cluster.changes import make_change, start_leave, start_resize, undo_join
from kvnode.cluster.members import Members
from kvnode.replica.errors import ReplicaRejected, ReplicaUnavailable
from kvnode.topology.membership import ChangeRefused, Membership
from tests.drivers import InProcessNode, claim_join, in_process_nodes, until

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"
SEEDED = Membership.seeded([A, B, C])


class Member:
    """A scripted member a change is offered to: it records each offer in ``log``, or refuses it."""

    def __init__(self, url: str, log: list[str], refusal: Exception | None = None) -> None:
        self.url, self.log, self.refusal = url, log, refusal

    async def offer_membership(self, encoded: bytes) -> None:
        if self.refusal is not None:
            raise self.refusal
        self.log.append(f"{self.url} took v{Membership.decode(encoded).version}")


def scripted(log: list[str], refusals: dict[str, Exception] | None = None) -> dict[str, Member]:
    """Every member, each refusing as ``refusals`` says (by URL)."""
    return {url: Member(url, log, (refusals or {}).get(url)) for url in (A, B, C, D)}


async def test_a_change_is_offered_to_the_claimant_then_stored_then_offered_to_the_others() -> None:
    log: list[str] = []
    members = scripted(log)
    await make_change(SEEDED.with_leaving(C), B, members.__getitem__, lambda: log.append("stored"))
    assert log == [f"{A} took v2", "stored", f"{C} took v2"]


async def test_the_claimant_making_a_change_stores_it_first() -> None:
    log: list[str] = []
    members = scripted(log)
    await make_change(SEEDED.resized(2), A, members.__getitem__, lambda: log.append("stored"))
    assert log == ["stored", f"{B} took v2", f"{C} took v2"]


async def test_a_change_the_claimant_refuses_is_refused_and_nothing_is_stored() -> None:
    log: list[str] = []
    members = scripted(log, {A: ReplicaRejected("version 2 is not newer than this node's 2")})
    with pytest.raises(ChangeRefused, match=f"the claimant {A} did not take the change: version 2 is not"):
        await make_change(SEEDED.with_joining(D), D, members.__getitem__, lambda: log.append("stored"))
    assert log == []


async def test_a_member_that_misses_the_offer_is_named_and_learns_it_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log: list[str] = []
    members = scripted(log, {C: ReplicaUnavailable(f"{C} is down")})
    with caplog.at_level(logging.WARNING):
        await make_change(SEEDED.with_leaving(B), B, members.__getitem__, lambda: log.append("stored"))
    assert log == [f"{A} took v2", "stored"]
    assert caplog.messages == [f"{C} did not take membership version 2 yet: {C} is down"]


async def test_a_leave_or_a_new_factor_needs_every_member(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as nodes:
        members = [node.open_members() for node in nodes]
        nodes[0].peers[nodes[2].url].reachable = False
        with pytest.raises(ChangeRefused, match=f"a leave needs every member; unreachable: {nodes[2].url}"):
            await start_leave(members[0], nodes[1].url, timeout_s=1.0)
        with pytest.raises(ChangeRefused, match="a new replication factor needs every member; unreachable"):
            await start_resize(members[0], 2, timeout_s=1.0)
        assert all(member.membership.version == 1 for member in members)


def running(node: InProcessNode) -> Members:
    assert node.members is not None
    return node.members


async def test_an_operator_undoes_a_join_from_any_member_the_claimant_first(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, gone = nodes
        joining = await claim_join(old, gone)
        old[1].peers[old[0].url].reachable = False  # the claimant out of reach: nothing changes
        with pytest.raises(ChangeRefused, match=f"the claimant {old[0].url} did not take the change"):
            await undo_join(running(old[1]), gone.url, "removed by the operator")
        assert all(running(node).membership == joining for node in old)
        old[1].peers[old[0].url].reachable = True
        plan = await undo_join(running(old[1]), gone.url, "removed by the operator")
        assert all(running(node).membership == plan for node in old)
        assert old[1].system.membership.load() == plan  # stored: a restart runs with it
        made = f"join of {gone.url} undone: removed by the operator (membership version 3)"
        assert running(old[1]).undone == made
        assert running(old[0]).undone == f"join of {gone.url} undone (membership version 3)"  # offered it


async def test_only_a_member_joining_is_removed(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, gone = nodes
        joining = await claim_join(old, gone)
        with pytest.raises(ChangeRefused, match="not joining: admin leave removes it"):
            await undo_join(running(old[0]), old[2].url, "removed by the operator")
        with pytest.raises(ChangeRefused, match="is not a member"):
            await undo_join(running(old[0]), "http://n9:8080", "removed by the operator")
        assert all(running(node).membership == joining for node in old)


async def test_a_joiner_that_still_answers_is_told_its_join_was_undone(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, late = nodes
        late.open_members()
        joining = await claim_join(old, late)
        assert running(late).membership == joining
        plan = await undo_join(running(old[0]), late.url, "removed by the operator")
        await until(lambda: running(late).without_this_node is not None, "the joiner told")
        assert running(late).without_this_node == plan and late.system.membership.load() == plan
