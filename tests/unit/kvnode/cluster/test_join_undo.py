"""kvnode.cluster.join_undo in-process: the claimant's watch undoes a join whose member never answers once
the timeout passed by its (here, a test's) monotonic clock, and never one that answers; ``admin remove``'s
undo, made from any member with the claimant first, and refused for a member that is not joining; a
joiner that still answers told so, ending its part. (The watch's rule alone:
tests/unit/kvnode/topology/test_join_watch.py; real nodes: tests/cluster/test_join_undo.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.cluster.changes import offer_change
from kvnode.cluster.join_undo import JoinWatch, undo_join
from kvnode.cluster.members import Members
from kvnode.topology.membership import ChangeRefused, Membership
from tests.drivers import InProcessNode, in_process_nodes, until

TIMEOUT_S = 10.0


class Ticks:
    """A monotonic clock that moves a second each time it is read (once a look)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


async def claimed(old: list[InProcessNode], newcomer: InProcessNode) -> Membership:
    """The members run with ``newcomer`` joining, as its claim leaves them (the claimant first)."""
    for node in old:
        node.open_members()
    members = old[0].members
    assert members is not None
    joining = members.membership.with_joining(newcomer.url)
    await offer_change(members, joining)
    assert all(node.members is not None and node.members.membership == joining for node in old)
    return joining


def watching(node: InProcessNode, clock: Ticks) -> JoinWatch:
    assert node.members is not None
    watch = JoinWatch(node.members, TIMEOUT_S, monotonic=clock, sleep=node.sleep)
    node.members.start([watch])
    return watch


def running(node: InProcessNode) -> Members:
    assert node.members is not None
    return node.members


async def test_the_claimant_undoes_a_join_whose_member_has_not_answered_for_the_timeout(
    tmp_path: Path,
) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, gone = nodes
        joining = await claimed(old, gone)
        for node in old:
            node.peers[gone.url].reachable = False  # it died once its claim was taken
        clock = Ticks()
        watch = watching(old[0], clock)
        await until(lambda: "no progress" in running(old[0]).undone, "the claimant undid it")
        assert all(running(node).membership.version == 3 for node in old)
        undone = running(old[0]).membership
        assert undone == joining.undone(gone.url)
        assert (undone.urls, undone.joining) == (tuple(node.url for node in old), frozenset())
        assert clock.now == TIMEOUT_S + 1  # the look that completed the silence, and none before
        assert (
            running(old[0]).undone
            == f"join of {gone.url} undone: no progress for 10 s (membership version 3)"
        )
        assert running(old[1]).undone == f"join of {gone.url} undone (membership version 3)"  # adopted it
        await watch.stop()


async def test_a_joiner_that_answers_is_never_undone_however_long_it_takes(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, slow = nodes
        joining = await claimed(old, slow)
        watch = watching(old[0], Ticks())
        await until(lambda: len(old[0].sleep.asked) >= 5 * TIMEOUT_S, "many looks")
        assert running(old[0]).membership == joining and running(old[0]).undone == ""
        await watch.stop()


async def test_only_the_claimant_watches(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, gone = nodes
        joining = await claimed(old, gone)
        old[1].peers[gone.url].reachable = False  # B does not hear from it; the claimant A does
        watches = [watching(old[0], Ticks()), watching(old[1], Ticks())]
        await until(lambda: len(old[0].sleep.asked) >= 5 * TIMEOUT_S, "the claimant's looks")
        assert old[1].sleep.asked == [] and running(old[1]).membership == joining  # B took no look
        for watch in watches:
            await watch.stop()


async def test_an_operator_undoes_a_join_from_any_member_the_claimant_first(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, gone = nodes
        joining = await claimed(old, gone)
        old[1].peers[old[0].url].reachable = False  # the claimant out of reach: nothing changes
        with pytest.raises(ChangeRefused, match=f"the claimant {old[0].url} did not take the change"):
            await undo_join(running(old[1]), gone.url, "removed by the operator")
        assert all(running(node).membership == joining for node in old)
        old[1].peers[old[0].url].reachable = True
        plan = await undo_join(running(old[1]), gone.url, "removed by the operator")
        assert all(running(node).membership == plan for node in old)
        assert old[1].system.membership.load() == plan  # stored: a restart runs with it
        assert running(old[1]).undone.startswith(f"join of {gone.url} undone: removed by the operator")


async def test_only_a_member_joining_is_removed(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, gone = nodes
        joining = await claimed(old, gone)
        with pytest.raises(ChangeRefused, match="not joining: admin leave removes it"):
            await undo_join(running(old[0]), old[2].url, "removed by the operator")
        with pytest.raises(ChangeRefused, match="is not a member"):
            await undo_join(running(old[0]), "http://n9:8080", "removed by the operator")
        assert all(running(node).membership == joining for node in old)


async def test_a_joiner_that_still_answers_is_told_its_join_was_undone(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, late = nodes
        late.open_members()
        joining = await claimed(old, late)
        assert running(late).membership == joining
        plan = await undo_join(running(old[0]), late.url, "removed by the operator")
        await until(lambda: running(late).left is not None, "the joiner told")
        assert running(late).left == plan and late.system.membership.load() == plan  # a restart is refused
