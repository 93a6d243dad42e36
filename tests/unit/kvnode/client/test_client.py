"""kvnode.client against nodes served in this process (tests/drivers.py): conditional writes and serial
reads, each outcome typed, the current version fetched after a 412, an unknown outcome never sent twice;
and its errors against canned answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from kvnode.client import (
    BadRequest,
    Client,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    QuorumNotReached,
    ServerError,
    Unreachable,
    Versioned,
)
from tests.drivers import Serve, served_members
from tests.loopback import served


async def storage_error(request: web.Request) -> web.Response:
    return web.Response(status=500, text="storage error: disk on fire\n")


@contextlib.asynccontextmanager
async def stub_node(
    view: bool, entity: Callable[[web.Request], Awaitable[web.Response]] = storage_error
) -> AsyncIterator[str]:
    """What a real node cannot be made to answer at will: ``entity`` answering every entity request (a 500
    storage error), behind a one-member cluster view (or, ``view=False``, a page that is not one)."""

    async def cluster_view(request: web.Request) -> web.Response:
        if not view:
            return web.Response(text="<html>not kvnode</html>")
        url = f"http://{request.host}"
        member = {"url": url, "self": True, "state": "self", "reachable": True, "down_for_s": 0.0}
        return web.json_response({"node": url, "cluster": [url], "members": [member]})

    app = web.Application()
    app.router.add_get("/v0/cluster", cluster_view)
    app.router.add_route("*", "/v0/entity", entity)
    async with served(app) as url:
        yield url


async def test_any_other_status_is_a_server_error() -> None:
    async with stub_node(view=True) as url, Client(url) as kv:
        with pytest.raises(ServerError) as error:
            await kv.put("k", b"v")
    assert error.value.status == 500 and error.value.reason == "storage error: disk on fire"


async def test_a_seed_that_does_not_answer_a_cluster_view_is_unreachable() -> None:
    with pytest.raises(Unreachable) as refused:
        async with Client("http://127.0.0.1:9", connect_timeout=1.0):
            pass
    assert refused.value.url == "http://127.0.0.1:9" and not refused.value.maybe_applied
    async with stub_node(view=False) as url:
        with pytest.raises(Unreachable) as garbage:
            async with Client(url):
                pass
    assert "did not answer a cluster view" in garbage.value.reason


async def test_conditional_writes_apply_only_over_the_version_named(serve: Serve) -> None:
    nodes = await served_members(serve, 3)
    async with Client(nodes[0].url) as kv:
        created = await kv.put_if("c", b"one", None)
        assert await kv.get_versioned("c") == Versioned(b"one", created)
        with pytest.raises(PreconditionFailed) as exists:
            await kv.put_if("c", b"two", None)
        assert (exists.value.etag, exists.value.value) == (created, b"one")
        assert exists.value.current == Versioned(b"one", created)
        assert exists.value.reason == "precondition failed: the key has a live value (If-None-Match: *)"
        updated = await kv.put_if("c", b"two", created, ttl_ms=60_000)
        assert updated != created
        with pytest.raises(PreconditionFailed) as stale:
            await kv.delete_if("c", created)
        assert stale.value.current == Versioned(b"two", updated)
        assert await kv.get("c", serial=True) == b"two"  # nothing written by the refused delete
        tombstone = await kv.delete_if("c", updated)
        assert await kv.get_versioned("c", serial=True) is None
        with pytest.raises(NotFound):
            await kv.get("c", serial=True)
        # A deleted key has no live value, and its tombstone a version a condition can name.
        with pytest.raises(PreconditionFailed) as deleted:
            await kv.put_if("c", b"three", created)
        assert deleted.value.current is None and (deleted.value.etag, deleted.value.value) == (None, None)
        assert await kv.put_if("c", b"three", tombstone) not in (created, updated, tombstone)
        with pytest.raises(BadRequest) as both:
            await kv.get("c", serial=True, ack=1)
        assert both.value.status == 400 and "takes no 'ack'" in both.value.reason
    # One round each on the node asked: 4 writes applied, 3 refused, each refusal's serial read and 3 more.
    rounds = Counter[str]()
    for node in nodes:
        rounds.update(node.parts.paxos.stats.rounds)
    assert rounds == {"applied": 4, "not_applied": 3, "read": 6, "unknown": 0}


async def increment(kv: Client, key: str, me: str, seq: int) -> None:
    """docs/conditional-writes.md's counter: client ``me``'s increment number ``seq``, applied once."""
    current = await kv.get_versioned(key, serial=True)
    while True:
        state: dict[str, Any] = json.loads(current.value) if current else {"count": 0, "last": {}}
        if state["last"].get(me, 0) >= seq:
            return
        state["count"] += 1
        state["last"][me] = seq
        try:
            await kv.put_if(key, json.dumps(state).encode(), current.etag if current else None)
            return
        except PreconditionFailed as refused:
            current = refused.current
        except OutcomeUnknown:
            current = await kv.get_versioned(key, serial=True)


async def test_clients_racing_on_a_counter_count_each_increment_once(serve: Serve) -> None:
    """Four clients, each seeded by another member, increment one counter five times each: whatever each
    write's outcome (applied, 412, or unknown: contention ends rounds so), each increment counts once. The
    timeout is long enough that no round ends unknown for want of time here."""
    nodes = await served_members(serve, 3, timeout_ms=10_000)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(nodes[i % 3].url)) for i in range(4)]

        async def five(kv: Client, me: str) -> None:
            for seq in range(1, 6):
                await increment(kv, "counter", me, seq)

        await asyncio.gather(*(five(kv, f"client-{i}") for i, kv in enumerate(clients)))
        final = json.loads(await clients[0].get("counter", serial=True))
    assert final == {"count": 20, "last": {f"client-{i}": 5 for i in range(4)}}
    # They did race: of the four first writes (If-None-Match: *) one applied, the others could not.
    assert sum(n.parts.paxos.stats.rounds[o] for n in nodes for o in ("not_applied", "unknown")) >= 3


def refused_then(read_status: int, read_reason: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An entity handler: 412 to a write, ``read_status`` to a GET."""

    async def answer(request: web.Request) -> web.Response:
        if request.method != "GET":
            return web.Response(status=412, text="precondition failed: the key has a live value\n")
        return web.Response(status=read_status, text=read_reason + "\n")

    return answer


async def test_a_412_whose_serial_read_fails_raises_the_reads_error_from_it() -> None:
    entity = refused_then(504, "outcome unknown: no quorum")
    async with stub_node(view=True, entity=entity) as url, Client(url) as kv:
        with pytest.raises(QuorumNotReached) as read:
            await kv.put_if("k", b"v", None)
    assert isinstance(read.value.__cause__, PreconditionFailed)


async def test_a_conditional_write_answered_without_an_etag_was_not_conditional() -> None:
    """A node older than conditional writes ignores their headers: it wrote, but unconditionally."""

    async def older(request: web.Request) -> web.Response:
        return web.Response(status=201, text="created\n")

    async with stub_node(view=True, entity=older) as url, Client(url) as kv:
        with pytest.raises(ServerError) as error:
            await kv.put_if("k", b"v", None)
    assert error.value.reason.endswith("older than conditional writes: it ignored the condition")


async def test_a_conditional_write_sent_and_not_answered_is_an_unknown_outcome() -> None:
    asked = 0
    release = asyncio.Event()  # the stub's answer, held back past the client's timeout

    async def silent(request: web.Request) -> web.Response:
        nonlocal asked
        asked += 1
        await release.wait()
        return web.Response(status=202, text="accepted\n")

    async with stub_node(view=True, entity=silent) as url, Client(url, timeout=0.3) as kv:
        with pytest.raises(OutcomeUnknown) as unknown:
            await kv.delete_if("k", "0" * 32)
        release.set()
    assert unknown.value.reason.endswith("the write may yet take effect") and asked == 1


async def test_a_conditional_writes_504_is_an_unknown_outcome_never_sent_twice(serve: Serve) -> None:
    """One member of three served: a round has no majority. A 504 is the same on every coordinator, so the
    client raises it at once; a serial read's 504 is a read's, QuorumNotReached."""
    (alone,) = await served_members(serve, 3, served=1)
    alone.clock_checked()  # its peers went down after they answered (else: 503, clock unchecked)
    async with Client(alone.url) as kv:
        with pytest.raises(OutcomeUnknown) as unknown:
            await kv.put_if("k", b"v", None)
        assert unknown.value.url == alone.url
        assert unknown.value.reason.startswith("outcome unknown: no quorum in the prepare phase")
        with pytest.raises(QuorumNotReached) as read:
            await kv.get_versioned("k", serial=True)
        assert not isinstance(read.value, OutcomeUnknown)
    assert alone.parts.paxos.stats.rounds["unknown"] == 2  # the write once, the read once
