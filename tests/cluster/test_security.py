"""The replica channel's security on real nodes: only members that hold the cluster secret get into the
channel (anyone else is refused before the upgrade and can neither read nor write through it), a rogue
node on a member's URL neither takes nor receives writes, a peer that sends more than the bounds allow or
garbage loses only its own connection, and a node without a secret serves the channel and warns once."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import aiohttp
import pytest

from kvnode.replica.channel import wire
from kvnode.replica.channel.handshake import ClusterAuth
from kvnode.replica.errors import ReplicaUnavailable
from kvnode.replica.peer import PeerReplica
from kvnode.storage.records import Record
from kvnode.topology.membership import cluster_identity
from tests.harness import Cluster, ClusterFactory, Node, request, stats, wait_for_log, write_secret_file

SECRET = "s3cret-" * 6


def keys(node: Node, prefix: str) -> list[bytes]:
    return [key for key, _ in node.scan(prefix, prefix + "\xff")]


async def try_channel(node: Node, auth: ClusterAuth | None) -> list[object]:
    """Through one replica channel to ``node``: a write of key "stolen", then a read of key "k"."""
    peer = PeerReplica(node.url, 2.0, auth=auth)
    try:
        return list(
            await asyncio.gather(
                peer.write(b"stolen", Record.put(time.time_ns() // 1000, b"x")),
                peer.read(b"k"),
                return_exceptions=True,
            )
        )
    finally:
        await peer.close()


def test_the_channel_serves_no_one_without_the_secret_and_the_cluster_identity(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    assert cluster[0].put("k", b"value", ack=3).status == 201
    urls = tuple(cluster.urls)
    target = cluster[0]
    refused = {
        "no secret": None,
        "wrong secret": ClusterAuth(b"a wrong secret!!", cluster_identity(urls), urls[1]),
        "another cluster": ClusterAuth(
            SECRET.encode(), cluster_identity((*urls, "http://127.0.0.1:1")), urls[1]
        ),
    }
    for name, auth in refused.items():
        outcomes = asyncio.run(try_channel(target, auth))
        assert all(isinstance(outcome, ReplicaUnavailable) for outcome in outcomes), (name, outcomes)
        assert "403" in str(outcomes[0]), (name, outcomes)
    for node in cluster:
        assert keys(node, "stolen") == []
    assert "refused a replica channel from 127.0.0.1" in target.log_path.read_text()
    # The same code with the cluster's credentials gets through: the refusals above are the handshake's.
    member = asyncio.run(try_channel(target, ClusterAuth(SECRET.encode(), cluster_identity(urls), urls[1])))
    assert member[0] is None and isinstance(member[1], Record) and member[1].value == b"value"
    assert keys(target, "stolen") == [b"stolen"]


def test_a_plain_upgrade_is_403_before_the_upgrade(start_cluster: ClusterFactory) -> None:
    node = start_cluster(3, cluster_secret=SECRET)[0]
    answer = request(
        node.url,
        "GET",
        "/v0/internal/replica",
        headers={
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "13",
        },
    )
    assert answer.status == 403
    assert SECRET not in answer.text
    assert SECRET not in request(node.url, "GET", "/v0/stats").text
    assert SECRET not in request(node.url, "GET", "/v0/status").text


def start_rogue(cluster: Cluster, tmp_path: Path, secret: str) -> Node:
    """A node on the stopped member's URL, with the cluster's list but not its secret."""
    victim = cluster[2]
    victim.stop()
    secret_file = None
    if secret:
        secret_file = write_secret_file(tmp_path / "rogue.secret", secret)
    config = dataclasses.replace(
        victim.config,
        data_dir=tmp_path / "rogue",
        cluster_secret=secret.encode(),
        cluster_secret_file=secret_file,
    )
    rogue = Node(config, tmp_path / "rogue.log")
    rogue.start()
    return rogue


@pytest.mark.parametrize(
    "rogue_secret", ["a wrong secret, long enough", ""], ids=["wrong-secret", "no-secret"]
)
def test_a_rogue_node_on_a_members_url_cannot_store_or_receive_writes(
    start_cluster: ClusterFactory, tmp_path: Path, rogue_secret: str
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    rogue = start_rogue(cluster, tmp_path, rogue_secret)
    try:
        # It reaches no member, so it cannot even check its clock: it stamps nothing (before issue 41 it
        # stored the write on itself only, which the members never saw).
        refused = rogue.put("rogue-write", b"evil", ack=1)
        assert refused.status == 503 and refused.text.startswith("clock unchecked"), refused.text
        assert cluster[0].put("member-write", b"private", ack=2).status == 201
        # Both sides have tried: the members refused the rogue's channel, and the member's channel to the
        # rogue failed its handshake (a 403 from a rogue with another secret, a 404 from one without).
        if rogue_secret:
            wait_for_log(rogue, "refused a replica channel from")
        wait_for_log(cluster[0], "refused: ")
        wait_for_log(rogue, "replica channel to")
        for member in cluster.nodes[:2]:
            assert keys(member, "rogue-write") == []
        assert keys(rogue, "member-write") == []
        hints = stats(cluster[0])["hints"]["pending"]
        assert hints.get(cluster[2].url, 0) >= 1  # kept for the real member
    finally:
        rogue.stop()


async def raw_channel(
    node: Node, as_url: str, urls: tuple[str, ...], session: aiohttp.ClientSession
) -> aiohttp.ClientWebSocketResponse:
    """An authenticated channel to ``node`` that sends whatever the test likes."""
    auth = ClusterAuth(SECRET.encode(), cluster_identity(urls), as_url)
    async with session.get(node.url + "/v0/internal/challenge") as answer:
        nonce = await answer.text()
    headers, _ = auth.upgrade_headers(node.url, nonce)
    return await session.ws_connect(node.url + "/v0/internal/replica", headers=headers, max_msg_size=0)


@pytest.mark.parametrize(
    ("frame", "close_code"),
    [
        (
            wire.encode_call(1, wire.Op.WRITE, b"big", b"x" * (2 * 1024 * 1024)),
            aiohttp.WSCloseCode.MESSAGE_TOO_BIG,
        ),
        (
            wire.encode_call(1, wire.Op.READ, b"k") * (wire.MAX_CALLS_PER_FRAME + 1),
            aiohttp.WSCloseCode.PROTOCOL_ERROR,
        ),
        (b"\x00\x00\x00\x02garbage", aiohttp.WSCloseCode.PROTOCOL_ERROR),
    ],
    ids=["oversize-frame", "too-many-calls", "garbage"],
)
def test_a_peer_breaking_the_bounds_loses_only_its_connection(
    start_cluster: ClusterFactory, frame: bytes, close_code: int
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET, max_body_bytes=64 * 1024)
    target = cluster[0]
    assert target.put("before", b"v", ack=3).status == 201

    async def offend() -> tuple[aiohttp.WSMessage, bool]:
        async with aiohttp.ClientSession() as session:
            ws = await raw_channel(target, cluster.urls[1], tuple(cluster.urls), session)
            await ws.send_bytes(frame)
            message = await ws.receive(timeout=10)
            return message, ws.closed or message.type is aiohttp.WSMsgType.CLOSE

    message, closed = asyncio.run(offend())
    assert closed and message.data == close_code, message
    assert keys(target, "big") == []
    # The node keeps serving its clients and its real peers, through channels already open.
    assert target.put("after", b"v", ack=3).status == 201
    for node in cluster:
        assert node.get("after", ack=3).status == 200
    peers = stats(cluster[1])["peers"]
    assert peers[target.url] == "connected"


def test_a_node_without_a_secret_warns_once_and_serves_the_channel(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(2)
    assert cluster[0].put("k", b"v", ack=2).status == 201
    assert cluster[0].log_path.read_text().count("no cluster secret") == 1
