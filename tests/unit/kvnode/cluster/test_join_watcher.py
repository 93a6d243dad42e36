"""kvnode.cluster.join_watcher in-process: the claimant's watcher undoes a join whose member never answers
once the timeout passed by its (here, a test's) monotonic clock, and never one that answers; only the
claimant watches. (The watch's rule alone: tests/unit/kvnode/topology/test_join_watch.py; the undo
itself: tests/unit/kvnode/cluster/test_changes.py; real nodes: tests/cluster/test_join_undo.py.)"""

from __future__ import annotations

from pathlib import Path

from kvnode.cluster.join_watcher import JoinWatcher
from kvnode.cluster.members import Members
from tests.drivers import InProcessNode, claim_join, in_process_nodes, until

TIMEOUT_S = 10.0


class Ticks:
    """A monotonic clock that moves a second each time it is read (once a look)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def watching(node: InProcessNode, clock: Ticks) -> JoinWatcher:
    assert node.members is not None
    watch = JoinWatcher(node.members, TIMEOUT_S, monotonic=clock, sleep=node.sleep)
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
        joining = await claim_join(old, gone)
        for node in old:
            node.peers[gone.url].reachable = False  # it died once its claim was taken
        clock = Ticks()
        watch = watching(old[0], clock)
        await until(lambda: all(running(node).membership.version == 3 for node in old), "undone everywhere")
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
        joining = await claim_join(old, slow)
        watch = watching(old[0], Ticks())
        await until(lambda: len(old[0].sleep.asked) >= 5 * TIMEOUT_S, "many looks")
        assert running(old[0]).membership == joining and running(old[0]).undone == ""
        await watch.stop()


async def test_only_the_claimant_watches(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, gone = nodes
        joining = await claim_join(old, gone)
        old[1].peers[gone.url].reachable = False  # B does not hear from it; the claimant A does
        watches = [watching(old[0], Ticks()), watching(old[1], Ticks())]
        await until(lambda: len(old[0].sleep.asked) >= 5 * TIMEOUT_S, "the claimant's looks")
        assert old[1].sleep.asked == [] and running(old[1]).membership == joining  # B took no look
        for watch in watches:
            await watch.stop()
