"""What one request of the check means for the history (ok, fail, info: surely applied, surely not, maybe),
and the caller that sends it exactly once and records what it saw: the status, the ETag, a connection that
could not be opened, a timeout, a connection dropped after the request was sent (never sent again)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from kvnode.check.calls import Caller, Reply, read_outcome, write_outcome
from kvnode.ops.ports import free_ports
from tests.loopback import served


def reply(status: int | None, body: bytes = b"", sent: bool = True, error: str = "") -> Reply:
    return Reply("http://n1", status, body, "", error, sent)


def test_writes_surely_applied_surely_not_or_maybe() -> None:
    assert write_outcome(reply(201)) == ("ok", "")
    assert write_outcome(reply(202)) == ("ok", "")
    for refused in (400, 401, 403, 412, 413, 503):
        assert write_outcome(reply(refused, b"why\n"))[0] == "fail", refused
    for maybe in (500, 504, 507):
        assert write_outcome(reply(maybe, b"why\n")) == ("info", f"{maybe} why"), maybe
    assert write_outcome(reply(None, sent=False, error="cannot connect")) == ("fail", "cannot connect")
    assert write_outcome(reply(None, error="timeout")) == ("info", "timeout")


def test_reads_answered_or_not() -> None:
    assert read_outcome(reply(200)) == ("ok", "")
    assert read_outcome(reply(404)) == ("ok", "")
    assert read_outcome(reply(504, b"1 of 3 replicas answered\n")) == ("fail", "504 1 of 3 replicas answered")
    assert read_outcome(reply(None, error="timeout")) == ("fail", "timeout")


class Node:
    """A node that answers PUTs 201 with an ETag, hangs on id=slow, and drops the connection on id=drop."""

    def __init__(self) -> None:
        self.puts = 0
        self.release = asyncio.Event()

    async def put(self, request: web.Request) -> web.StreamResponse:
        self.puts += 1
        await request.read()
        key = request.query["id"]
        if key == "slow":
            await self.release.wait()
        if key == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        return web.Response(
            status=201, headers={"ETag": '"v1"', "X-If-Match": request.headers.get("If-Match", "")}
        )


@pytest.fixture
async def node() -> AsyncIterator[tuple[str, Node]]:
    node = Node()
    app = web.Application()
    app.router.add_put("/v0/entity", node.put)
    async with served(app) as url:
        yield url, node
        node.release.set()


async def test_an_answer_is_recorded_with_its_etag(node: tuple[str, Node]) -> None:
    url, _ = node
    async with Caller() as caller:
        answer = await caller.entity(url, "PUT", "k", headers={"If-Match": '"v0"'}, body=b"x")
    assert (answer.status, answer.etag, answer.error) == (201, '"v1"', "")


async def test_a_timeout_and_a_connection_that_cannot_be_opened_are_told_apart(
    node: tuple[str, Node],
) -> None:
    url, _ = node
    async with Caller(timeout=0.2) as caller:
        slow = await caller.entity(url, "PUT", "slow", body=b"x")
        closed = await caller.entity(f"http://127.0.0.1:{free_ports(1)[0]}", "PUT", "k", body=b"x")
    assert (slow.status, slow.error, slow.sent) == (None, "timeout", True)
    assert closed.status is None and closed.error.startswith("cannot connect") and not closed.sent


async def test_a_write_whose_connection_drops_is_sent_once_and_may_have_been_applied(
    node: tuple[str, Node],
) -> None:
    url, counting = node
    async with Caller() as caller:
        assert (await caller.entity(url, "PUT", "k", body=b"x")).status == 201  # a kept-alive connection
        dropped = await caller.entity(url, "PUT", "drop", body=b"x")  # on that connection
    assert dropped.status is None and dropped.error.startswith("no answer") and dropped.sent
    assert write_outcome(dropped)[0] == "info"
    assert counting.puts == 2  # aiohttp would have sent it again on a fresh connection
