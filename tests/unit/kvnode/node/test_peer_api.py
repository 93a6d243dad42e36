"""kvnode.node.peer_api's replica channel route in-process, on a real aiohttp server on loopback: a peer
that goes away during the WebSocket upgrade is one quiet line in the log, not an aiohttp ERROR with a
traceback."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from pathlib import Path
from typing import cast

import pytest
from aiohttp import web

from kvnode.node.peer_api import ANSWERERS, CallAnswers, PeerGate, serve_peer
from kvnode.replica import wire
from kvnode.replica.channel import PEER_PATH
from kvnode.replica.protocol import PROTOCOL
from kvnode.storage.keyspace import Storage

UPGRADE = (
    f"GET {PEER_PATH} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
).encode()


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
            return await serve_peer(request, gate, storage, cast(CallAnswers, None), set())
        finally:
            served.set()

    app = web.Application()
    app.router.add_get(PEER_PATH, channel)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        with socket.create_connection(("127.0.0.1", site.port)) as peer:
            peer.sendall(UPGRADE)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset on close
        async with asyncio.timeout(10):
            await served.wait()
    finally:
        await runner.cleanup()  # waits for the handler, and whatever aiohttp logs after it
        storage.close()
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == []
    quiet = [record for record in caplog.records if record.name == "kvnode.node.peer_api"]
    assert [record.levelno for record in quiet] == [logging.INFO], [r.getMessage() for r in quiet]
    assert "went away during the upgrade" in quiet[0].getMessage()


def test_the_server_answers_every_call_of_the_protocol_and_no_other() -> None:
    """One table of the replica calls: the peer resolves replies by PROTOCOL, the server answers by
    ANSWERERS; every op of the wire is in both."""
    assert set(ANSWERERS) == set(PROTOCOL) == set(wire.Op)
