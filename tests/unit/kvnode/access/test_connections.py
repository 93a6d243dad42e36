"""The connection guard (kvnode.access.connections) in one process: its counts and bounds, and an app
served through GuardedRunner on a loopback port, spoken to with raw bytes (a refused request answered in
one line, a line over the parser's limit with the limit, request headers timed, the cap with its reserve
for peers, the direct routes); and the aiohttp internals it relies on, checked by name.
(tests/cluster/test_limits.py has the guard in real nodes.)"""

from __future__ import annotations

import asyncio
import inspect
import logging
import resource
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler

from kvnode.access.connections import (
    DIRECT_ROUTES,
    ConnectionGuard,
    GuardedRunner,
    Kind,
    capacity,
    raise_descriptor_limit,
)
from kvnode.replica.channel.handshake import CHALLENGE_PATH
from tests.harness import eventually

ANSWER_S = 30.0  # a bound on waiting for an answer the server gives at once


async def test_the_aiohttp_internals_the_connection_guard_relies_on_are_there() -> None:
    """kvnode.access.connections names these; an aiohttp upgrade that renames or reshapes one fails here."""
    assert inspect.iscoroutinefunction(web.AppRunner._make_server)

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    server = web.Server(handler, keepalive_timeout=5)
    assert server._kwargs == {"keepalive_timeout": 5}
    protocol = RequestHandler(server, loop=asyncio.get_running_loop())
    assert not protocol._messages and protocol._request_in_progress is False
    assert list(inspect.signature(RequestHandler.handle_error).parameters) == [
        "self", "request", "status", "exc", "message",
    ]  # fmt: skip


def test_connections_beyond_the_cap_are_provisional_up_to_the_reserve_then_refused() -> None:
    guard = ConnectionGuard(max_connections=2, peer_reserve=1, header_timeout=10.0)
    assert [guard.admit() for _ in range(4)] == [Kind.CLIENT, Kind.CLIENT, Kind.PROVISIONAL, None]
    assert (guard.clients, guard.provisional, guard.refused) == (3, 1, 1)
    guard.release(Kind.PROVISIONAL)
    guard.release(Kind.CLIENT)
    assert (guard.clients, guard.provisional) == (1, 0)
    guard.release(Kind.PEER)  # a peer's connection was no longer counted
    assert guard.clients == 1
    assert guard.refusal == "too many connections (2 clients); retry"


def test_capacity_keeps_a_reserve_per_peer_and_leaves_the_descriptors_storage_needs() -> None:
    given = capacity(members=3, max_connections=100, header_timeout_s=7)
    assert (given.max_connections, given.peer_reserve, given.header_timeout) == (100, 16 + 2 * 4, 7)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    derived = capacity(members=1, max_connections=0, header_timeout_s=10).max_connections
    assert derived == max(soft - 2000 - 64 - 16, soft // 2)  # LevelDB's files, the process's, the reserve


def test_the_descriptor_limit_is_raised_to_the_hard_limit() -> None:
    before, after = raise_descriptor_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert before <= after == soft
    assert hard == resource.RLIM_INFINITY or soft == hard


def app_with_direct_route() -> web.Application:
    """GET / and the handshake's path answer by the router; GET /direct only by the direct routes."""

    async def routed(request: web.Request) -> web.Response:
        return web.Response(text=f"routed {request.path}\n")

    async def direct(request: web.Request) -> web.Response:
        return web.Response(text="direct\n")

    app = web.Application()
    app.router.add_get("/", routed)
    app.router.add_get(CHALLENGE_PATH, routed)
    routes: dict[tuple[str, str], Handler] = {("GET", "/direct"): direct}
    app[DIRECT_ROUTES] = routes
    return app


@asynccontextmanager
async def guarded(guard: ConnectionGuard) -> AsyncIterator[int]:
    """The app served through GuardedRunner on a loopback port, which is yielded."""
    runner = GuardedRunner(app_with_direct_route(), guard, idle_timeout=60)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def exchange(port: int, sent: bytes) -> bytes:
    """Send ``sent`` on a new connection and read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(sent)
        return await asyncio.wait_for(reader.read(), ANSWER_S)
    finally:
        writer.close()


def get(path: str, *headers: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", "Host: x", "Connection: close", *headers, "", ""]).encode()


async def test_a_request_the_parser_refuses_is_answered_400_in_one_line() -> None:
    async with guarded(ConnectionGuard(100, 0, 10.0)) as port:
        answer = await exchange(port, b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 400 ")  # the request line was refused: aiohttp answers in HTTP/1.0
    assert body.startswith(b"malformed request: ") and body.count(b"\n") == 1 and body.endswith(b"\n")


async def test_a_request_line_or_header_over_the_parsers_limit_is_answered_with_the_limit() -> None:
    """Not aiohttp's "Got more than 8190 bytes when reading: bytearray(b'/v0/entity?...": a 414 for the
    request line (a key too long), with the longest key that always fits, and a 431 for a header line."""
    async with guarded(ConnectionGuard(100, 0, 10.0)) as port:
        long_key = await exchange(port, get("/v0/entity?id=" + "k" * 9000))
        long_header = await exchange(port, get("/", "X-Big: " + "b" * 9000))
    head, _, body = long_key.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 414 ")
    assert body == (
        b"request line too long: it is at most 8190 bytes, and a key of up to 8000 bytes percent-encoded "
        b"always fits (a byte other than A-Z a-z 0-9 - . _ ~ takes 3)\n"
    )
    head, _, body = long_header.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 431 ")
    assert body == b"request header too long: a header line is at most 8190 bytes\n"


async def test_a_key_of_the_length_said_to_fit_fits_with_every_parameter() -> None:
    """The 414's promise: a PUT's request line with an 8000-byte key and every parameter is parsed."""
    line = "/v0/entity?id=" + "k" * 8000 + "&ack=3&from=3&ttl=630720000000"
    async with guarded(ConnectionGuard(100, 0, 10.0)) as port:
        answer = await exchange(port, get(line).replace(b"GET ", b"PUT ", 1))
    assert answer.startswith(b"HTTP/1.1 404 ")  # parsed, and routed: the test's app has no such route


async def test_a_client_gone_during_a_streamed_answer_is_one_info_line_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A backup that fails on one member stops its streams from the others: their handlers' writes fail
    (aiohttp's ClientConnectionResetError), which aiohttp logged as an ERROR with a traceback."""
    streaming, ended = asyncio.Event(), asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            while True:  # until the client is gone: each write waits while the client is behind
                await response.write(b"x" * (1 << 20))
                streaming.set()
        finally:
            ended.set()

    app = web.Application()
    app.router.add_get("/stream", endless)
    runner = GuardedRunner(app, ConnectionGuard(100, 0, 10.0), idle_timeout=60)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        with caplog.at_level(logging.INFO):
            reader, writer = await asyncio.open_connection("127.0.0.1", runner.addresses[0][1])
            writer.write(get("/stream"))
            await asyncio.wait_for(streaming.wait(), ANSWER_S)
            await reader.read(1 << 16)
            writer.close()
            await asyncio.wait_for(ended.wait(), ANSWER_S)
            await eventually(lambda: "closed the connection" in caplog.text)
    finally:
        await runner.cleanup()
    assert [record.getMessage() for record in caplog.records if record.name == "kvnode"] == [
        "GET /stream: the client closed the connection during the answer"
    ]
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


async def test_request_headers_not_all_in_within_the_timeout_close_the_connection() -> None:
    guard = ConnectionGuard(100, 0, header_timeout=0.1)
    async with guarded(guard) as port:
        partial = await exchange(port, b"GET / HTTP/1.1\r\nHost:")
        silent = await exchange(port, b"")
        assert partial.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert partial.endswith(b"\r\n\r\nrequest headers not received within 0.1 s\n")
        assert silent == b""  # nothing of a request came: closed without an answer
        assert guard.header_timeouts == 2
        await eventually(lambda: guard.clients == 0, what="both connections released")


async def test_a_keep_alive_connection_whose_next_request_headers_stall_is_closed_with_408() -> None:
    guard = ConnectionGuard(100, 0, header_timeout=0.1)
    async with guarded(guard) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /direct HTTP/1.1\r\nHost: x\r\n\r\n")  # kept alive
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_S)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            assert await asyncio.wait_for(reader.readexactly(length), ANSWER_S) == b"direct\n"
            writer.write(b"GET /direct HTTP/1.1\r\nHo")
            late = await asyncio.wait_for(reader.read(), ANSWER_S)
        finally:
            writer.close()
    assert late.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert guard.header_timeouts == 1


async def test_the_guard_counts_connections_and_answers_one_beyond_the_cap_503_at_once() -> None:
    guard = ConnectionGuard(max_connections=1, peer_reserve=0, header_timeout=10.0)
    async with guarded(guard) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await eventually(lambda: guard.clients == 1, what="the first connection counted")
            refused = await exchange(port, b"")  # its request not even sent
            assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert b"\r\nRetry-After: 1\r\n" in refused
            assert refused.endswith(b"\r\n\r\ntoo many connections (1 clients); retry\n")
            assert guard.refused == 1
            writer.write(get("/"))
            assert (await asyncio.wait_for(reader.read(), ANSWER_S)).endswith(b"routed /\n")
        finally:
            writer.close()
        await eventually(lambda: guard.clients == 0, what="the connection released")


async def test_a_provisional_connection_may_only_shake_hands() -> None:
    guard = ConnectionGuard(max_connections=1, peer_reserve=1, header_timeout=10.0)
    async with guarded(guard) as port:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await eventually(lambda: guard.clients == 1, what="the first connection counted")
            refused = await exchange(port, get("/"))
            assert refused.startswith(b"HTTP/1.1 503 ")
            assert refused.endswith(b"too many connections (1 clients); retry\n")
            assert (await exchange(port, get("/direct"))).startswith(b"HTTP/1.1 503 ")  # hot routes too
            handshake = await exchange(port, get(CHALLENGE_PATH))
            assert handshake.startswith(b"HTTP/1.1 200 ")
            assert handshake.endswith(f"routed {CHALLENGE_PATH}\n".encode())
            assert guard.refused == 2
        finally:
            writer.close()


async def test_a_direct_route_is_called_past_the_router_unless_the_request_expects() -> None:
    async with guarded(ConnectionGuard(100, 0, 10.0)) as port:
        direct = await exchange(port, get("/direct?with=query"))
        expecting = await exchange(port, get("/direct", "Expect: 100-continue"))
        escaped = await exchange(port, get("/%64irect"))
    assert direct.startswith(b"HTTP/1.1 200 ") and direct.endswith(b"direct\n")
    # Through the router, which has no such route (after aiohttp's interim 100 Continue).
    assert b"\r\n\r\nHTTP/1.1 404 Not Found\r\n" in expecting and not expecting.endswith(b"direct\n")
    # A target that must be decoded is matched as sent: the router's way, where the app routes it.
    assert escaped.startswith(b"HTTP/1.1 404 ")
