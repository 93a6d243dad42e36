"""A node's parts opened and closed (kvnode.node.wiring) in this process: the membership it runs with
stored at the first start and kept over --cluster after it, every replica call answered by its owner,
everything closed at the end (the data dir
opens again), and a start that cannot be made refused before it opened anything; a ping on a member's
channel to this node told to this node's channel to that member (an arrival: an idle pair pings once a
beat)."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from pathlib import Path

import pytest

from kvnode.access.client_auth import BadTokensFile
from kvnode.access.tls import TlsUnusable
from kvnode.config import NodeConfig
from kvnode.node.wiring import open_parts
from kvnode.ops.ports import free_ports
from kvnode.replica.peer import PeerReplica
from kvnode.storage.keyspace import StorageUnavailable
from tests.drivers import Serve, ServedNode

A, B, C = "http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"


def member(data_dir: Path, cluster: tuple[str, ...], url: str = A) -> NodeConfig:
    port = int(url.rsplit(":", 1)[1])
    return NodeConfig(data_dir=data_dir, port=port, cluster=cluster, timeout_ms=200)


async def test_the_membership_is_stored_at_the_first_start_and_kept_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_parts(member(tmp_path, (A, B))) as parts:
        assert parts.membership.urls == (A, B) and [peer.url for peer in parts.peers] == [B]
        assert parts.system.membership.load() == parts.membership
    with caplog.at_level(logging.WARNING):
        async with open_parts(member(tmp_path, (A, B, C))) as parts:  # the data dir opens again
            assert parts.membership.urls == (A, B)
    assert "--cluster differs from the stored membership (version 1), which this node keeps" in caplog.text


async def test_a_wired_node_answers_every_call_of_the_replica_protocol(tmp_path: Path) -> None:
    """Each call's owner registered its answerer (kvnode.replica.channel.protocol's table, a row a call)."""
    async with open_parts(member(tmp_path, (A, B))) as parts:
        assert parts.replica_server.answerers.unanswered == frozenset()


async def test_a_node_that_is_not_a_member_of_its_stored_cluster_is_refused(tmp_path: Path) -> None:
    async with open_parts(member(tmp_path, (A, B))):
        pass
    with pytest.raises(StorageUnavailable) as refused:
        async with open_parts(member(tmp_path, (C,), url=C)):
            pass
    assert str(refused.value) == (
        f"{C} is not a member of the cluster stored in {tmp_path} ({A},{B}): start it with its member URL, "
        "or with another data dir"
    )


async def test_a_node_that_left_is_refused_saying_so_with_no_warning_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What a node that left stores (kvnode.cluster.members): the others' membership, and its own URL."""
    async with open_parts(member(tmp_path, (A, B))) as parts:
        without = parts.membership.with_leaving(A).removed(A)
        parts.system.membership.save(without, left=A)
    for cluster in [(), (A, B)]:  # as the README restarts a member; with the --cluster it started with
        with caplog.at_level(logging.WARNING), pytest.raises(StorageUnavailable) as refused:
            async with open_parts(member(tmp_path, cluster)):
                pass
        assert str(refused.value) == (
            f"{A} left the cluster (or its join was undone) in membership version 3: the data dir "
            f"{tmp_path} is no longer a member's; to serve again, join with --join SEED_URL and a new "
            "--data-dir (or this one wiped)"
        )
        assert caplog.text == ""


async def test_unusable_tls_or_tokens_files_are_refused_before_the_data_dir_is_made(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    data_dir = tmp_path / "data"
    https = NodeConfig(data_dir=data_dir, tls_cert=missing, tls_key=missing, tls_ca=missing)
    with pytest.raises(TlsUnusable):
        async with open_parts(https):
            pass
    with pytest.raises(BadTokensFile):
        async with open_parts(NodeConfig(data_dir=data_dir, auth_tokens_file=missing)):
            pass
    assert not data_dir.exists()


async def test_a_ping_on_a_member_s_channel_is_told_to_this_node_s_channel_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate looks the pinging member up at each ping, so a member that joined since is found; a URL
    that names no peer (a stranger, this node's own) is ignored."""
    async with open_parts(member(tmp_path, (A, B))) as parts:
        parts.members.adopt(parts.membership.with_joining(C))  # C's channel is made after the gate
        told: list[str] = []
        for peer in parts.peers:
            monkeypatch.setattr(peer, "pinged", partial(told.append, peer.url))
        pinged = parts.replica_server.gate.pinged
        assert pinged is not None
        for url in (B, C, "http://stranger:1", A):
            pinged(url)
        assert told == [B, C]


async def test_the_lower_member_s_pings_reach_the_other_s_channel_to_it(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two members served in this process: the lower URL's channel pings (the leader of the pair), and
    the higher member's channel to it is told of each ping, an arrival there (the step by step account
    of who pings when is tests/unit/kvnode/replica/test_peer_state.py's)."""
    told: list[str] = []  # the URL of each peer whose channel was told of a ping
    heard = PeerReplica.pinged

    def counted(peer: PeerReplica) -> None:
        told.append(peer.url)
        heard(peer)

    monkeypatch.setattr(PeerReplica, "pinged", counted)
    urls = tuple(sorted(f"http://127.0.0.1:{port}" for port in free_ports(2)))
    nodes = [await serve(port=int(url.rsplit(":", 1)[1]), cluster=urls) for url in urls]
    await until_connected(nodes)
    async with asyncio.timeout(15):  # a beat is 250 ms; the deadline is for a busy machine
        while urls[0] not in told:  # the higher member's channel to the lower (the only one with that URL)
            await asyncio.sleep(0.05)


async def until_connected(nodes: list[ServedNode]) -> None:
    async with asyncio.timeout(15):
        while not all(peer.connected for node in nodes for peer in node.parts.peers):
            await asyncio.sleep(0.05)
