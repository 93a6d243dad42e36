"""kvnode.replica.channel.server's replica channel route in-process, on a real aiohttp server on
loopback: a peer that goes away during the WebSocket upgrade is one quiet line in the log, not an aiohttp
ERROR with a traceback; a peer that shares no protocol version with the node is refused, a failed replica,
and both ends log one line naming both ranges, as does a node beside an older one that says no range; a
call of a later version than the channel speaks is refused as an unknown op; a frame's calls go to the
registered answerers and its replies go out in frames of about wire.FRAME_TARGET bytes. A peer's ping is
answered (a clock ping with this node's clock), and told to the gate; a peer replica's heartbeat measures
the clock with clock pings where the channel speaks them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import wall_clock_us
from kvnode.clocks.offsets import ClockOffsets, Offset
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.channel.client import PEER_PATH
from kvnode.replica.channel.handshake import CLIENT_HEADER, Introduction
from kvnode.replica.channel.identities import Identities
from kvnode.replica.channel.protocol import CLOCK_PINGS, Versions, spoken
from kvnode.replica.channel.server import PeerGate, serve_peer
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record, encode
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership
from tests.loopback import served
from tests.replicas import storage_answerers

UPGRADE = (
    f"GET {PEER_PATH} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
).encode()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def never_asked() -> bytes:
    raise AssertionError("no clock ping is sent")


@contextlib.asynccontextmanager
async def serving(channel: Handler) -> AsyncIterator[str]:
    """The URL of an aiohttp server on loopback that answers the replica channel's route with ``channel``;
    on leaving, it has waited for the handlers and whatever aiohttp logs after them."""
    app = web.Application()
    app.router.add_get(PEER_PATH, channel)
    async with served(app) as url:
        yield url


async def test_a_peer_gone_during_the_upgrade_is_one_quiet_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    storage = Storage.open(tmp_path / "records", fsync=False)
    gate = PeerGate(auth=None, limits=wire.Limits.for_body(1 << 20))
    served = asyncio.Event()

    async def channel(request: web.Request) -> web.StreamResponse:
        # The upgrade is answered only once the server has seen the peer go: the race made certain.
        async with asyncio.timeout(10):
            while request.transport is not None:
                await asyncio.sleep(0.01)
        try:
            # No frame is ever read, so nothing asks for the answers.
            return await serve_peer(request, gate, Answerers(), never_asked, set())
        finally:
            served.set()

    try:
        async with serving(channel) as url:
            with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as peer:
                peer.sendall(UPGRADE)
                peer.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )  # reset on close
            async with asyncio.timeout(10):
                await served.wait()
    finally:
        storage.close()
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == []
    quiet = [record for record in caplog.records if record.name == "kvnode.replica.channel.server"]
    assert [record.levelno for record in quiet] == [logging.INFO], [r.getMessage() for r in quiet]
    assert "went away during the upgrade" in quiet[0].getMessage()


async def test_a_frame_of_calls_is_answered_in_frames_of_about_the_target_size(tmp_path: Path) -> None:
    """Replies to one frame travel in one frame while together under wire.FRAME_TARGET, else in frames
    closed once they reach it; every call answered once, in order."""
    storage = Storage.open(tmp_path / "records", fsync=False)
    small, big = Record.put(1, b"s"), Record.put(1, b"b" * (wire.FRAME_TARGET // 2))
    for key, record in ((b"small", small), (b"big-1", big), (b"big-2", big), (b"big-3", big)):
        storage.apply(key, record)
    answerers, clock = storage_answerers(storage)
    gate = PeerGate(None, wire.Limits.for_body(1 << 20))

    async def channel(request: web.Request) -> web.StreamResponse:
        return await serve_peer(request, gate, answerers, clock.now, set())

    try:
        async with (
            serving(channel) as url,
            aiohttp.ClientSession() as session,
            session.ws_connect(url + PEER_PATH) as ws,
        ):
            await ws.send_bytes(
                wire.encode_call(1, wire.Op.READ, b"small") + wire.encode_call(2, wire.Op.READ, b"none")
            )
            one = wire.decode_replies(await ws.receive_bytes(timeout=10))
            await ws.send_bytes(b"".join(wire.encode_call(n, wire.Op.READ, b"big-%d" % n) for n in (1, 2, 3)))
            frames = [wire.decode_replies(await ws.receive_bytes(timeout=10)) for _ in range(2)]
    finally:
        storage.close()
    assert one == [(1, wire.Status.FOUND, encode(small)), (2, wire.Status.ABSENT, b"")]
    assert [[reply.call_id for reply in frame] for frame in frames] == [[1, 2], [3]]
    assert all(reply.payload == encode(big) for frame in frames for reply in frame)


async def test_a_ping_is_answered_with_its_pong_and_tells_the_gate_which_peer_pinged(tmp_path: Path) -> None:
    """No autoping: the server answers a ping itself and tells the gate the URL of the peer that pinged (the
    node counts it as that peer's sign of life); a pong nobody asked for is ignored; binary frames are
    answered as ever, and tell the gate nothing."""
    storage = Storage.open(tmp_path / "records", fsync=False)
    told: list[str] = []
    gate = PeerGate(None, wire.Limits.for_body(1 << 20), pinged=told.append)
    answerers, clock = storage_answerers(storage)

    async def channel(request: web.Request) -> web.StreamResponse:
        return await serve_peer(request, gate, answerers, clock.now, set())

    try:
        async with (
            serving(channel) as url,
            aiohttp.ClientSession() as session,
            session.ws_connect(url + PEER_PATH, autoping=False, headers={CLIENT_HEADER: CLIENT_URL}) as ws,
        ):
            await ws.ping(b"beat")
            pong = await ws.receive(timeout=10)
            await ws.pong(b"unasked")
            await ws.send_bytes(wire.encode_call(1, wire.Op.READ, b"k"))
            replies = wire.decode_replies(await ws.receive_bytes(timeout=10))
            assert told == [CLIENT_URL]
            await ws.ping()
            second = await ws.receive(timeout=10)
    finally:
        storage.close()
    assert (pong.type, pong.data, second.type) == (aiohttp.WSMsgType.PONG, b"beat", aiohttp.WSMsgType.PONG)
    assert replies == [(1, wire.Status.ABSENT, b"")]
    assert told == [CLIENT_URL, CLIENT_URL]


@pytest.mark.parametrize("speaks", [Versions(1, CLOCK_PINGS - 1), Versions(1, CLOCK_PINGS)])
async def test_a_clock_ping_is_answered_with_this_nodes_clock_where_the_channel_speaks_them(
    tmp_path: Path, system_db: SystemDb, speaks: Versions
) -> None:
    """On a channel that speaks clock pings, a ping of 8 bytes (the pinger's wall clock) is answered with
    them and a CLOCK reply's payload (kvnode.replica.clock_probe); another ping is echoed. On an older
    channel every ping is echoed, as a server of that version does."""
    storage = Storage.open(tmp_path / "records", fsync=False)
    wall_us = 1_700_000_000_123_456  # this node's wall clock, as its fence reads it
    fence = ClockFence(lambda: wall_us, 5_000_000, ClockOffsets(max_age_s=10.0), peers=0)
    answerers, clock = storage_answerers(storage, fence)
    headers = {CLIENT_HEADER: CLIENT_URL, **Introduction(protocols=speaks).headers()}
    ping = wire.encode_timestamp(wall_us - 500)  # the pinger's clock
    try:
        async with (
            node_speaking(system_db, spoken(), answerers, clock.now) as server,
            aiohttp.ClientSession() as session,
            session.ws_connect(server + PEER_PATH, autoping=False, headers=headers) as ws,
        ):
            await ws.ping(ping)
            clock_pong = (await ws.receive(timeout=10)).data
            await ws.ping(b"beat")
            plain = (await ws.receive(timeout=10)).data
    finally:
        storage.close()
    assert plain == b"beat"
    if speaks.high < CLOCK_PINGS:
        assert clock_pong == ping
    else:
        assert clock_pong == ping + wire.encode_clock(wall_us, "serving")


@pytest.mark.parametrize("speaks", [Versions(1, CLOCK_PINGS - 1), Versions(1, CLOCK_PINGS)])
async def test_a_peer_measures_the_clock_at_its_heartbeat_with_a_clock_ping_where_the_channel_speaks_them(
    tmp_path: Path, system_db: SystemDb, speaks: Versions
) -> None:
    """A peer replica with a clock sampler, against this server: one CLOCK call when its channel connects,
    then a measurement every few beats, by a clock ping on a channel that speaks them (no other CLOCK call)
    and by a CLOCK call on an older one; their round trips make the peer's distance."""
    storage = Storage.open(tmp_path / "records", fsync=False)
    samples: list[tuple[str, Offset]] = []
    measured_twice = asyncio.Event()

    def sample(peer: str, offset: Offset) -> None:
        samples.append((peer, offset))
        if len(samples) == 2:
            measured_twice.set()

    answerers, clock = storage_answerers(storage)
    try:
        async with node_speaking(system_db, spoken(), answerers, clock.now) as server:
            client = identities(system_db, CLIENT_URL, server, speaks)
            # A 0.2 s timeout beats every 50 ms, so the eighth beat measures 0.4 s after the connection.
            peer = PeerReplica(server, 0.2, identities=client, clock_sampler=(sample, wall_clock_us()))
            try:
                assert await peer.reach(10.0)
                async with asyncio.timeout(10):
                    await measured_twice.wait()
                clock_calls, spoke = peer.meter.calls["clock", "ok"], peer.protocol
                trips, distance = [2 * offset.uncertainty_us / 1e6 for _, offset in samples], peer.distance
            finally:
                await peer.close()
    finally:
        storage.close()
    assert [peer for peer, _ in samples[:2]] == [server, server] and peer.node_state == "serving"
    assert distance == min(trips)  # each measurement's round trip is the failure detector's too
    assert spoke == speaks.high
    assert clock_calls == (1 if speaks.high >= CLOCK_PINGS else 2)


CLIENT_URL = "http://127.0.0.1:1"


def identities(system_db: SystemDb, url: str, other: str, protocols: Versions) -> Identities:
    """What a node at ``url`` says of itself to ``other``: the protocol versions ``protocols`` among it."""
    membership = Membership.seeded((url, other))
    return Identities(
        url, membership, system_db.identity, system_db.peer_identities, lambda *_: None, protocols
    )


@contextlib.asynccontextmanager
async def node_speaking(
    system_db: SystemDb,
    protocols: Versions,
    answerers: Answerers | None = None,
    clock_now: Callable[[], bytes] = never_asked,
) -> AsyncIterator[str]:
    """The URL of a replica server on loopback whose node speaks the protocol versions ``protocols`` to
    CLIENT_URL and answers with ``answerers`` (none: every call fails)."""
    url: list[str] = []

    async def channel(request: web.Request) -> web.StreamResponse:
        gate = PeerGate(
            None, wire.Limits.for_body(1 << 20), identities(system_db, url[0], CLIENT_URL, protocols)
        )
        return await serve_peer(request, gate, answerers or Answerers(), clock_now, set())

    async with serving(channel) as server:
        url.append(server)
        yield server


async def refused_by(url: str, client: Identities) -> tuple[str, str, str]:
    """A PeerReplica's state and refusal after one call to ``url``, and the call's error."""
    peer = PeerReplica(url, 2.0, identities=client)
    try:
        outcome = await asyncio.gather(peer.read(b"k"), return_exceptions=True)
        return peer.state, peer.refusal, str(outcome[0])
    finally:
        await peer.close()


async def test_a_peer_with_no_protocol_version_in_common_is_refused_with_both_ranges_named(
    system_db: SystemDb, caplog: pytest.LogCaptureFixture
) -> None:
    """A node that dropped version 1 (2-2 here) beside one that speaks only 1: the server refuses the
    upgrade, and the client takes the peer for a refused replica, its call failed, the caller unharmed."""
    caplog.set_level(logging.WARNING)
    async with node_speaking(system_db, Versions(2, 2)) as server:
        client = identities(system_db, CLIENT_URL, server, Versions(1, 1))
        state, refusal, error = await refused_by(server, client)
    assert (state, refusal) == ("refused", "protocol")
    reason = f"no protocol version in common: this node speaks 2-2, {CLIENT_URL} 1-1"
    assert reason in error and "upgrade one node at a time" in error
    lines = [record.getMessage() for record in caplog.records]
    assert [line for line in lines if line.startswith("refused a replica channel")] == [
        f"refused a replica channel from 127.0.0.1: {reason}"
    ]
    client_lines = [line for line in lines if line.startswith(f"replica channel to {server} refused")]
    assert len(client_lines) == 1 and reason in client_lines[0], lines


async def test_a_node_that_dropped_version_1_refuses_an_older_node_that_says_no_range(
    system_db: SystemDb, caplog: pytest.LogCaptureFixture
) -> None:
    """A kvnode from before ranges were said answers the upgrade with no range: it speaks 1 only."""
    caplog.set_level(logging.WARNING)

    async def older_node(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        ws.headers.update(Introduction("0e" * 16).headers())
        await ws.prepare(request)
        await ws.receive()  # until the client gives the channel up
        return ws

    async with serving(older_node) as server:
        client = identities(system_db, CLIENT_URL, server, Versions(2, 2))
        state, refusal, error = await refused_by(server, client)
    assert (state, refusal) == ("refused", "protocol")
    assert f"no protocol version in common: this node speaks 2-2, {server} 1-1" in error
    assert any(f"replica channel to {server} refused" in record.getMessage() for record in caplog.records)


async def test_a_call_of_a_later_version_than_the_channel_speaks_drops_the_channel(
    tmp_path: Path, system_db: SystemDb, caplog: pytest.LogCaptureFixture
) -> None:
    """A server pinned to version 1 and a client that speaks 1-2 agree on 1; a DELETE (version 2) sent
    anyway is an unknown op there: the channel is dropped, the call fails, nothing is stored."""
    caplog.set_level(logging.WARNING)
    storage = Storage.open(tmp_path / "records", fsync=False)
    try:
        async with node_speaking(system_db, Versions(1, 1)) as server:
            peer = PeerReplica(
                server, 2.0, identities=identities(system_db, CLIENT_URL, server, Versions(1, 2))
            )
            try:
                assert await peer.reach(2.0) and peer.protocol == 1
                call = peer.call(wire.Op.DELETE, b"k", wire.encode_delete(Record.delete(7)), label="repair")
                outcome = await asyncio.gather(call, return_exceptions=True)
            finally:
                await peer.close()
        assert isinstance(outcome[0], ReplicaError), outcome
        assert storage.read(b"k") is None
    finally:
        storage.close()
    assert any("unknown op 11" in record.getMessage() for record in caplog.records)
