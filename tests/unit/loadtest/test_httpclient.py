"""loadtest.httpclient through the generator, against raw TCP servers that answer in awkward ways:
split into pieces, closing after each answer, garbage, no length, never; a connection idle past the
pool's bound closed before it is used; and the cas op's requests, and the ETag a connection keeps for
it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from loadtest import openloop
from loadtest.httpclient import HttpConnection, RequestEncoder
from loadtest.openloop import run_rate
from loadtest.workload import Workload

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Answer], Awaitable[str]]]:
    """raw_server(answer) -> URL of a server calling ``answer`` per request read (its head)."""
    servers: list[asyncio.Server] = []

    async def start(answer: Answer) -> str:
        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while await _read_request(reader):
                    await answer(reader, writer)
                    if writer.is_closing():
                        return
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(connection, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> bool:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return bool(head)


def test_requests_are_encoded_once_with_the_query_headers_and_body() -> None:
    encoder = RequestEncoder(Workload("put", keys=1, value_size=3, ack=1, from_=2), "http://127.0.0.1:8080")
    payload, method = encoder.next()
    value = Workload("put", keys=1, value_size=3).value
    assert method == "PUT"
    assert payload == (
        b"PUT /v0/entity?id=key-00000000&ack=1&from=2 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        b"Content-Length: 3\r\n\r\n" + value
    )
    get, _ = RequestEncoder(Workload("get", keys=1, path="/"), "http://localhost:9").next()
    assert get == b"GET /?id=key-00000000 HTTP/1.1\r\nHost: localhost:9\r\n\r\n"


def test_a_cas_op_reads_then_writes_on_the_condition_its_read_found() -> None:
    encoder = RequestEncoder(Workload("cas", keys=1, value_size=2, token="t"), "http://127.0.0.1:8080")
    read, key = encoder.cas_read()
    assert (read, key) == (
        b"GET /v0/entity?id=key-00000000 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer t\r\n\r\n",
        b"key-00000000",
    )
    value = Workload("cas", keys=1, value_size=2).value
    head = b"PUT /v0/entity?id=key-00000000 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAuthorization: Bearer t\r\n"
    body = b"Content-Length: 2\r\n\r\n" + value
    assert encoder.cas_write(key, b'"00ff"') == head + b'If-Match: "00ff"\r\n' + body
    assert encoder.cas_write(key, b"") == head + b"If-None-Match: *\r\n" + body


async def test_an_answer_in_pieces_is_put_together(raw_server: Callable[[Answer], Awaitable[str]]) -> None:
    async def in_pieces(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in (OK[:10], OK[10:40], OK[40:-2], OK[-2:]):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.002)

    url = await raw_server(in_pieces)
    result = await run_rate([url], Workload("get", keys=10), 100, 0.5, connections=8)
    assert result.requests == 50 and not result.errors


async def test_a_server_that_closes_after_each_answer_is_reconnected(
    raw_server: Callable[[Answer], Awaitable[str]],
) -> None:
    async def then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        await writer.drain()
        writer.close()

    url = await raw_server(then_close)
    result = await run_rate([url], Workload("get", keys=10), 100, 0.5, connections=2)
    assert result.requests == 50 and not result.errors


async def test_a_connection_idle_past_the_pool_bound_is_closed_and_opened_again_before_it_is_used(
    raw_server: Callable[[Answer], Awaitable[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node closes a connection idle for --idle-timeout-s; a request written into it as it closes
    would fail. The generator closes one idle past its own, shorter, bound first and sends on a new one."""
    answered_on: list[asyncio.StreamWriter] = []  # each answer's connection (held: ids stay unique)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered_on.append(writer)
        writer.write(OK)
        await writer.drain()

    url = await raw_server(answer)
    result = await run_rate([url], Workload("get", keys=10), 20, 0.25, connections=1)
    assert result.requests == 5 and not result.errors
    assert len({id(writer) for writer in answered_on}) == 1  # idle 50 ms at most: kept
    answered_on.clear()
    monkeypatch.setattr(openloop, "_POOL_IDLE_S", 0.0)  # every idle connection is past it
    result = await run_rate([url], Workload("get", keys=10), 20, 0.25, connections=1)
    assert result.requests == 5 and not result.errors
    assert len({id(writer) for writer in answered_on}) > 1


class Transport:
    """What HttpConnection uses of an asyncio transport: it records writes and whether it was closed."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


def test_a_connection_closed_after_its_answer_is_let_go_before_the_next_request_is_sent() -> None:
    """A generator behind its schedule sends the next request from on_done: the connection must read as
    closed by then, so that it reconnects, and the first transport's late connection_lost changes
    nothing for the second."""
    seen: list[tuple[str, bool]] = []
    connection = HttpConnection(
        "127.0.0.1", 9, 0, lambda done, outcome: seen.append((outcome, done.connected))
    )
    first, second = Transport(), Transport()
    connection.connection_made(first)  # type: ignore[arg-type]
    connection.send(b"GET / HTTP/1.1\r\n\r\n")
    connection.data_received(OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
    assert seen == [("200", False)] and first.closed
    connection.connection_made(second)  # type: ignore[arg-type]
    connection.send(b"GET / HTTP/1.1\r\n\r\n")
    connection.connection_lost(None)  # the first one's, late
    assert connection.connected and connection.busy and seen == [("200", False)]
    connection.data_received(OK)
    assert seen == [("200", False), ("200", True)] and second.written and not second.closed


def test_a_connection_that_reads_etags_keeps_each_answers_etag() -> None:
    seen: list[bytes] = []
    connection = HttpConnection("127.0.0.1", 9, 0, lambda done, outcome: seen.append(done.etag))
    connection.connection_made(Transport())  # type: ignore[arg-type]
    tagged = OK.replace(b"\r\n\r\n", b'\r\nEtag:  "00ff" \r\n\r\n', 1)
    connection.reads_etag = True
    for answer in (tagged, OK):
        connection.send(b"GET / HTTP/1.1\r\n\r\n")
        connection.data_received(answer)
    connection.reads_etag = False  # the other ops: no time spent on it
    connection.send(b"GET / HTTP/1.1\r\n\r\n")
    connection.data_received(tagged)
    assert seen == [b'"00ff"', b"", b""]


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage that is not HTTP\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nno length",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        OK + b"and bytes nobody asked for",
    ],
)
async def test_an_answer_that_cannot_be_read_is_a_bad_response(
    raw_server: Callable[[Answer], Awaitable[str]], answer: bytes
) -> None:
    async def bad(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)
        await writer.drain()

    url = await raw_server(bad)
    result = await run_rate([url], Workload("get", keys=10), 50, 0.4, connections=4)
    assert result.requests == 20
    assert set(result.errors) <= {"bad-response", "connection"} and result.errors["bad-response"] > 0


async def test_a_server_that_never_answers_times_out(raw_server: Callable[[Answer], Awaitable[str]]) -> None:
    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(60)

    url = await raw_server(never)
    result = await run_rate([url], Workload("get", keys=10), 20, 0.5, connections=20, request_timeout=0.3)
    assert result.errors == {"timeout": 10}
    assert result.latency.count == 10 and result.latency.percentile_ms(50) >= 300  # at least the timeout
