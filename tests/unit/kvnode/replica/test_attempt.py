"""kvnode.replica.attempt: one connect attempt against loopback servers that answer the upgrade, refuse
it, never answer, close at once or do not listen: the channel, or AttemptFailed saying how it failed in
the peer state machine's terms, with its connection aborted."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
from aiohttp import web

from kvnode.replica.attempt import AttemptFailed, connector, open_channel
from kvnode.replica.channel.client import PEER_PATH, ClientChannel
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer_state import AttemptFailure
from tests.loopback import served

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
DEADLINE_S = 30.0  # for what must happen; never reached when it does


class Listener:
    def heard_from(self, channel: ClientChannel) -> None:
        pass

    def received(self, channel: ClientChannel, frame: bytes) -> None:
        pass

    def ponged(self, channel: ClientChannel, payload: bytes) -> None:
        pass

    def writable(self, channel: ClientChannel) -> None:
        pass

    def drop(self, channel: ClientChannel, error: ReplicaError, level: int = 0) -> None:
        pass


def new_channel(port: int) -> Callable[[], ClientChannel]:
    return partial(ClientChannel, Listener(), f"http://127.0.0.1:{port}", f"127.0.0.1:{port}", None, 1 << 20)


async def attempt(port: int, timeout: float = DEADLINE_S) -> ClientChannel:
    return await open_channel(new_channel(port), "127.0.0.1", port, ssl_context=None, timeout=timeout)


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def answering(answer: bytes) -> Handler:
    """A server that answers the upgrade request with ``answer``, then closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    return handle


async def test_an_accepted_upgrade_gives_the_channel() -> None:
    """aiohttp's WebSocketResponse, the server end a node runs, accepts the upgrade."""
    closed = asyncio.Event()

    async def peer(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for _ in ws:
            pass
        closed.set()
        return ws

    app = web.Application()
    app.router.add_get(PEER_PATH, peer)
    async with served(app) as url:
        channel = await attempt(int(url.rsplit(":", 1)[1]))
        assert channel.upgraded.done() and channel.upgraded.exception() is None
        channel.transport.close()
        await asyncio.wait_for(closed.wait(), DEADLINE_S)


async def test_a_peer_that_never_answers_is_no_answer_and_its_connection_is_aborted() -> None:
    ended = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(4096):
                pass
        except ConnectionResetError:  # abort() resets the connection
            pass
        ended.set()
        writer.close()

    async with serving(silent) as port:
        with pytest.raises(AttemptFailed) as failed:
            await attempt(port, timeout=0.2)
        assert (failed.value.failure, failed.value.reason) == (AttemptFailure.NO_ANSWER, "no answer")
        await asyncio.wait_for(ended.wait(), DEADLINE_S)


async def test_a_port_nobody_listens_on_is_unreachable() -> None:
    with socket.socket() as bound:  # bound, never listening: a connection to it is refused
        bound.bind(("127.0.0.1", 0))
        with pytest.raises(AttemptFailed) as failed:
            await attempt(bound.getsockname()[1])
    assert failed.value.failure is AttemptFailure.UNREACHABLE and failed.value.reason


async def test_a_connection_closed_before_the_upgrade_is_answered_is_unreachable() -> None:
    async with serving(answering(b"")) as port:
        with pytest.raises(AttemptFailed) as failed:
            await attempt(port)
    assert failed.value.failure is AttemptFailure.UNREACHABLE
    assert "connection lost" in failed.value.reason


@pytest.mark.parametrize(
    ("answer", "refusal", "reason"),
    [
        (
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 12\r\n\r\nnot a member",
            "membership",
            "says: not a member",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "handshake", "upgrade refused: 'HTTP/1.1 200 OK'"),
    ],
)
async def test_a_refused_upgrade_is_denied_saying_what_it_was_about(
    answer: bytes, refusal: str, reason: str
) -> None:
    async with serving(answering(answer)) as port:
        with pytest.raises(AttemptFailed) as failed:
            await attempt(port)
    assert (failed.value.failure, failed.value.refusal) == (AttemptFailure.DENIED, refusal)
    assert reason in failed.value.reason, failed.value.reason


def test_a_peer_url_without_a_host_or_a_port_is_refused_when_the_peer_is_made() -> None:
    for url in ("http://127.0.0.1", "http://:8080", "127.0.0.1:8080"):
        with pytest.raises(ValueError, match="a peer URL is http://HOST:PORT"):
            connector(Listener(), url, None, 1 << 20, None, ssl_context=None, timeout=1.0)
