"""kvnode.cluster.bootstrap in-process: a node joining through a seed (the claimant first, then the rest),
in its zone and datacenter, refused while a member is unreachable with nothing left behind, and a
replacement refused while the member answers (and taking its place, zone and datacenter, once it is
down); a seed that refuses the joiner's cluster secret is named as refusing it, with the flag that fixes
it; the change's own channels log nothing, and no other channel is silenced. Every member in-process, the
seed's /v0/status on an HTTP server of the test. (tests/cluster/test_join.py and test_replace.py run real
nodes, crash points included.)"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
from aiohttp import web

from kvnode.cluster.bootstrap import CHANNELS_LOG, OpenPeer, take_place
from kvnode.config import NodeConfig
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.channel.handshake import SECRET_ADVICE, ClusterAuth
from kvnode.replica.channel.server import PeerGate, ReplicaServer
from kvnode.replica.peer import PeerReplica
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import ChangeRefused
from tests.drivers import InProcessNode, InProcessPeer, in_process_nodes
from tests.loopback import served


@contextlib.asynccontextmanager
async def seed_status(cluster: str) -> AsyncIterator[str]:
    """An in-process HTTP server answering /v0/status as a member does (the cluster's identity): a
    joining node asks its seed that before anything else."""

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"cluster_id": cluster})

    app = web.Application()
    app.router.add_get("/v0/status", status)
    async with served(app) as url:
        yield url


def joining(
    newcomer: InProcessNode,
    seed: str,
    seed_node: InProcessNode,
    replace: str = "",
    zone: str = "",
    datacenter: str = "",
) -> tuple[NodeConfig, SystemDb, None, OpenPeer]:
    """take_place's arguments for ``newcomer``: its config, system database, and peers (in-process)."""
    host = newcomer.url.split("//")[1].split(":")[0]
    config = NodeConfig(host=host, join=seed, replace=replace, zone=zone, datacenter=datacenter)
    assert config.url == newcomer.url

    def open_peer(url: str, auth: ClusterAuth | None, logger: logging.Logger) -> PeerReplica:
        assert logger is CHANNELS_LOG
        return cast(PeerReplica, InProcessPeer(seed_node, newcomer)) if url == seed else newcomer.peer(url)

    return config, newcomer.system, None, open_peer


async def test_a_node_joins_through_a_seed_the_claimant_first_then_the_rest(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, members=3) as nodes:
        *old, newcomer = nodes
        for node in old:
            node.open_members()
        async with seed_status(old[0].membership.cluster) as seed:
            plan = await take_place(*joining(newcomer, seed, old[1], zone="r9", datacenter="west"))
        assert plan.version == 2 and plan.joining == {newcomer.url}
        assert (plan.zone_of(newcomer.url), plan.datacenter_of(newcomer.url)) == ("r9", "west")
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
        assert plan.zones == old[0].membership.zones  # its predecessor's zone and datacenter
        assert newcomer.system.identity.saved_state() == "rebuilding"  # it rebuilds the member's data


SEED_SECRET = b"the-seed-holds-this-secret"


@contextlib.asynccontextmanager
async def seed_with_secret(cluster: str) -> AsyncIterator[str]:
    """A seed answering /v0/status and, holding SEED_SECRET, the replica channel's routes as a node does."""
    listening = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listening.getsockname()[1]}"

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"cluster_id": cluster})

    app = web.Application()
    app.router.add_get("/v0/status", status)
    gate = PeerGate(ClusterAuth(SEED_SECRET, cluster, url), wire.Limits.for_body(1 << 20))
    ReplicaServer(gate, Answerers(), lambda: b"").add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.SockSite(runner, listening).start()
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        (b"", "{seed} requires a cluster secret, and this node has none"),
        (
            b"a-secret-the-seed-does-not-hold",
            "{seed} says: replica channel refused: wrong proof: the connecting node holds a different "
            "cluster secret than this node (or belongs to another cluster)",
        ),
    ],
)
async def test_a_seed_refusing_the_secret_is_said_to_refuse_it_with_the_flag_that_fixes_it(
    tmp_path: Path, secret: bytes, why: str
) -> None:
    """Not "the seed is unreachable: secret": the seed answered, refused this node's secret (or its
    lack of one), and the line says so in full, as the seed's own log does."""
    async with in_process_nodes(tmp_path, 1, members=1) as (newcomer,), seed_with_secret("c1") as seed:
        config = NodeConfig(host="127.0.0.1", join=seed, cluster_secret=secret)

        def open_peer(url: str, auth: ClusterAuth | None, logger: logging.Logger) -> PeerReplica:
            return PeerReplica(url, 2.0, auth=auth, logger=logger)

        with pytest.raises(ChangeRefused) as refused:
            await take_place(config, newcomer.system, None, open_peer)
        assert newcomer.system.membership.load() is None
    assert str(refused.value) == (
        f"cannot join: the seed {seed} refused this node's replica channel: upgrade refused "
        f"('HTTP/1.1 403 Forbidden'): {why.format(seed=seed)}; {SECRET_ADVICE}"
    )
    assert "--cluster-secret-file" in SECRET_ADVICE


def test_the_changes_channels_log_nothing_and_the_nodes_own_channels_still_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The channels take_place opens log to a logger of its own that drops everything; the replica
    channels' own logger is left as it was (no filter on it: every other channel still logs)."""
    peers = logging.getLogger("kvnode.replica.peer")
    with caplog.at_level(logging.INFO):
        CHANNELS_LOG.warning("replica channel to %s dropped: %s", "http://n2:8080", "refused")
        peers.warning("replica channel to %s dropped: %s", "http://n3:8080", "refused")
    assert [record.getMessage() for record in caplog.records] == [
        "replica channel to http://n3:8080 dropped: refused"
    ]
    assert peers.filters == []
