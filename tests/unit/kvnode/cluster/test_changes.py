"""kvnode.cluster.changes in-process: a leave from start to end (start_leave on one member, then the leaving
member's own part, OwnPart: the barrier, the drain, the stream to the next owners, the removal offered to
the claimant first), and a step that fails tried again through the driver's sleep; a new replication
factor from start to end (start_resize, then the claimant's part), or refused while a member is
unreachable; every node in-process.
(The steps alone are tests/unit/kvnode/topology/test_change_steps.py; tests/cluster/test_leave.py and
test_join.py run real nodes, crash points included.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
from aiohttp import web

from kvnode.cluster.changes import OpenPeer, OwnPart, start_leave, start_resize, take_place
from kvnode.config import NodeConfig
from kvnode.replica.channel.handshake import ClusterAuth
from kvnode.replica.peer import PeerReplica
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import ChangeRefused, Membership
from kvnode.topology.placement import Placement
from tests.drivers import InProcessNode, InProcessPeer, in_process_nodes, until

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


async def test_a_member_leaves_after_streaming_each_key_it_owns_to_its_next_owner(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, replication=3) as nodes:
        *stay, leaving = nodes
        for node in nodes:
            node.open_members()
        part = own_part(leaving)
        placement = leaving.membership.placement()
        owned = [f"key-{i}" for i in range(40) if leaving.url in placement.owners(f"key-{i}".encode())]
        kept = {key: leaving.put(key, b"value") for key in owned}  # the others hold them too, in a cluster

        assert stay[0].members is not None
        plan = await start_leave(stay[0].members, leaving.url, timeout_s=1.0)
        assert plan.leaving == {leaving.url}
        await until(lambda: leaving.members is not None and leaving.members.left is not None, "it left")
        await until(
            lambda: all(n.members and n.members.membership.version == 3 for n in stay), "v3 everywhere"
        )

        by_url = {node.url: node for node in stay}
        for key, record in kept.items():
            owner = by_url[next_owner(leaving.membership, plan, leaving.url, key)]
            assert owner.storage.read(key.encode()) == record, key
        assert leaving.members is not None and leaving.members.streamed == len(owned)
        assert DRAIN_S in leaving.sleep.asked  # the drain, through the driver's sleep
        await part.stop()


async def test_a_step_that_fails_is_tried_again_until_it_completes(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, replication=3) as nodes:
        *stay, leaving = nodes
        for node in nodes:
            node.open_members()
        part = own_part(leaving)
        placement = leaving.membership.placement()
        key = next(f"key-{i}" for i in range(100) if leaving.url in placement.owners(f"key-{i}".encode()))
        record = leaving.put(key, b"value")
        assert stay[0].members is not None
        plan = await start_leave(stay[0].members, leaving.url, timeout_s=1.0)
        target = next_owner(leaving.membership, plan, leaving.url, key)
        leaving.peers[target].reachable = False  # the stream to it fails, and is tried again
        await until(lambda: leaving.sleep.asked.count(1.0) >= 2, "two retries")
        assert leaving.members is not None and leaving.members.left is None
        leaving.peers[target].reachable = True
        await until(lambda: leaving.members is not None and leaving.members.left is not None, "it left")
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
        assert (plan.version, plan.replication, plan.next_replication) == (2, 2, 3)
        await until(
            lambda: all(m is not None and m.membership.replication == 3 for m in members), "N = 3 everywhere"
        )

        after = Placement([node.url for node in nodes], replication=3)
        for key in keys:
            assert all(by_url[url].storage.read(key.encode()) for url in after.owners(key.encode())), key
        claimant = nodes[0].members
        assert claimant is not None and claimant.streamed == 2 * len(keys)  # from each of its 2 owners
        assert DRAIN_S in nodes[0].sleep.asked and DRAIN_S not in nodes[1].sleep.asked  # the claimant's
        for part in parts:
            await part.stop()


@contextlib.asynccontextmanager
async def seed_status(cluster: str) -> AsyncIterator[str]:
    """An in-process HTTP server answering /v0/status as a member does (the cluster's identity): a
    joining node asks its seed that before anything else."""

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"cluster_id": cluster})

    app = web.Application()
    app.router.add_get("/v0/status", status)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def joining(
    newcomer: InProcessNode, seed: str, seed_node: InProcessNode, replace: str = ""
) -> tuple[NodeConfig, SystemDb, None, OpenPeer]:
    """take_place's arguments for ``newcomer``: its config, system database, and peers (in-process)."""
    config = NodeConfig(host=newcomer.url.split("//")[1].split(":")[0], join=seed, replace=replace)
    assert config.url == newcomer.url

    def open_peer(url: str, auth: ClusterAuth | None) -> PeerReplica:
        return cast(PeerReplica, InProcessPeer(seed_node, newcomer)) if url == seed else newcomer.peer(url)

    return config, newcomer.system, None, open_peer


async def test_a_node_joins_through_a_seed_the_claimant_first_then_the_rest(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, newcomer = nodes
        for node in old:
            node.open_members()
        async with seed_status(old[0].membership.cluster) as seed:
            plan = await take_place(*joining(newcomer, seed, old[1]))
        assert plan.version == 2 and plan.joining == {newcomer.url}
        assert newcomer.system.membership.load() == plan  # stored before it runs with it
        assert all(node.members is not None and node.members.membership == plan for node in old)


async def test_a_join_needs_every_member_and_leaves_nothing_when_refused(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, newcomer = nodes
        for node in old:
            node.open_members()
        newcomer.peers[old[2].url].reachable = False
        async with seed_status(old[0].membership.cluster) as seed:
            with pytest.raises(ChangeRefused, match=f"unreachable: {old[2].url}"):
                await take_place(*joining(newcomer, seed, old[0]))
        assert newcomer.system.membership.load() is None
        assert all(node.members is not None and node.members.membership.version == 1 for node in old)


async def test_a_member_that_answers_is_not_replaced_and_one_down_is(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, newcomer = nodes
        for node in old[:2]:
            node.open_members()
        async with seed_status(old[0].membership.cluster) as seed:
            with pytest.raises(ChangeRefused, match="a member that is up is not replaced"):
                await take_place(*joining(newcomer, seed, old[0], replace=old[2].url))
            newcomer.peers[old[2].url].reachable = False  # down for good
            plan = await take_place(*joining(newcomer, seed, old[0], replace=old[2].url))
        assert plan.urls == (old[0].url, old[1].url, newcomer.url)
        assert newcomer.system.identity.saved_state() == "rebuilding"  # it rebuilds the member's data
