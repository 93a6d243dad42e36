"""kvnode.cluster.own_part in-process: a leave from start to end (started on one member, then the leaving
member's own part: the barrier, the drain, the stream to the next owners, the removal offered to the
claimant first), its progress as the node reports it, and a step that fails tried again through the
driver's sleep; a new replication factor from start to end (started, then the claimant's part); every
node in-process. (The actions alone are tests/unit/kvnode/topology/test_change_steps.py;
tests/cluster/test_leave.py and test_join.py run real nodes, crash points included.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.cluster.changes import start_leave, start_resize
from kvnode.cluster.own_part import OwnPart
from kvnode.config import ReplicationFactor as N
from kvnode.topology.membership import ChangeRefused, Membership
from kvnode.topology.placement import Placement
from tests.drivers import InProcessNode, in_process_nodes, until

DRAIN_S = 2.0


def own_part(node: InProcessNode) -> OwnPart:
    """The node's part in a change, told of every membership it runs with (as the node's parts do)."""
    members = node.members
    assert members is not None
    part = OwnPart(
        members, node.anti_entropy(), node.storage, node.local, DRAIN_S, crash_at="", sleep=node.sleep
    )
    members.start([part])
    return part


def next_owner(first: Membership, plan: Membership, leaving: str, key: str) -> str:
    """The member that owns ``key`` once ``leaving`` is gone and did not under ``first``."""
    before = set(first.placement().owners(key.encode()))
    after = set(plan.removed(leaving).placement().owners(key.encode()))
    [newcomer] = after - before
    return newcomer


def leaving_last(nodes: list[InProcessNode]) -> tuple[list[InProcessNode], InProcessNode, OwnPart]:
    """Every node's Members opened; the last node, which is to leave, with its part in a change."""
    *stay, leaving = nodes
    for node in nodes:
        node.open_members()
    return stay, leaving, own_part(leaving)


def owned_by(node: InProcessNode, count: int) -> list[str]:
    """Those of ``count`` keys that ``node`` owns."""
    placement = node.membership.placement()
    return [f"key-{i}" for i in range(count) if node.url in placement.owners(f"key-{i}".encode())]


async def test_a_member_leaves_after_streaming_each_key_it_owns_to_its_next_owner(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, replication=3) as nodes:
        stay, leaving, part = leaving_last(nodes)
        owned = owned_by(leaving, 40)
        kept = {key: leaving.put(key, b"value") for key in owned}  # the others hold them too, in a cluster

        assert stay[0].members is not None
        plan = await start_leave(stay[0].members, leaving.url, timeout_s=1.0)
        assert plan.leaving == {leaving.url}
        await until(lambda: part.progress.step is None, "it left")
        assert leaving.members is not None and leaving.members.without_this_node == plan.removed(leaving.url)
        await until(
            lambda: all(n.members and n.members.membership.version == 3 for n in stay), "v3 everywhere"
        )

        by_url = {node.url: node for node in stay}
        for key, record in kept.items():
            owner = by_url[next_owner(leaving.membership, plan, leaving.url, key)]
            assert owner.storage.read(key.encode()) == record, key
        assert part.progress.to_json() == {"version": 2, "step": "done", "streamed": len(owned)}
        assert part.streamed == len(owned)  # since start: this change's alone
        assert DRAIN_S in leaving.sleep.asked  # the drain, through the driver's sleep
        await part.stop()


async def test_a_step_that_fails_is_tried_again_until_it_completes(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, replication=3) as nodes:
        stay, leaving, part = leaving_last(nodes)
        key = owned_by(leaving, 100)[0]
        record = leaving.put(key, b"value")
        assert stay[0].members is not None
        plan = await start_leave(stay[0].members, leaving.url, timeout_s=1.0)
        target = next_owner(leaving.membership, plan, leaving.url, key)
        leaving.peers[target].reachable = False  # the stream to it fails, and is tried again
        await until(lambda: leaving.sleep.asked.count(1.0) >= 2, "two retries")
        assert leaving.members is not None and leaving.members.without_this_node is None
        assert part.progress.to_json()["step"] == "stream"  # where it is, as /v0/cluster says it
        leaving.peers[target].reachable = True
        await until(
            lambda: leaving.members is not None and leaving.members.without_this_node is not None, "it left"
        )
        assert next(node for node in stay if node.url == target).storage.read(key.encode()) == record
        await part.stop()


async def test_a_new_replication_factor_streams_every_new_copy_before_it_counts(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, replication=2) as nodes:
        for node in nodes:
            node.open_members()
        parts = [own_part(node) for node in nodes]
        by_url = {node.url: node for node in nodes}
        keys = [f"key-{i}" for i in range(40)]
        for key in keys:  # on its two owners, as a write with from = N = 2 leaves it
            for url in nodes[0].membership.placement().owners(key.encode()):
                by_url[url].put(key, b"value")
        members = [node.members for node in nodes]
        asked = nodes[1].members  # not the claimant: it offers the change to the claimant first
        assert asked is not None

        nodes[1].peers[nodes[3].url].reachable = False  # every member's records stream: each must answer
        with pytest.raises(ChangeRefused, match=f"needs every member; unreachable: {nodes[3].url}"):
            await start_resize(asked, 3, timeout_s=1.0)
        nodes[1].peers[nodes[3].url].reachable = True
        plan = await start_resize(asked, 3, timeout_s=1.0)
        assert (plan.version, plan.replication, plan.next_replication) == (2, N(2), N(3))
        await until(
            lambda: all(m is not None and m.membership.replication == N(3) for m in members),
            "N = 3 everywhere",
        )

        after = Placement([node.url for node in nodes], replication=3)
        for key in keys:
            assert all(by_url[url].storage.read(key.encode()) for url in after.owners(key.encode())), key
        await until(lambda: parts[0].progress.step is None, "the claimant's part over")
        assert parts[0].progress.streamed == 2 * len(keys)  # the claimant's: from each of a key's 2 owners
        assert parts[0].progress.step is None and parts[1].progress.version == 0  # it walked; no other
        assert DRAIN_S in nodes[0].sleep.asked and DRAIN_S not in nodes[1].sleep.asked  # the claimant's
        for part in parts:
            await part.stop()
