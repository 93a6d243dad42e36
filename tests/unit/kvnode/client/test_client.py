"""kvnode.client against real node processes: every call and error, token-aware routing (seen in each
node's /metrics), a killed or frozen member routed around, and a 503's Retry-After honoured. Conditional
writes and serial reads against nodes served in this process (tests/drivers.py): each outcome typed, the
current version fetched after a 412, an unknown outcome never sent twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import pytest
from aiohttp import web

from kvnode.client import (
    BadRequest,
    Client,
    NotFound,
    OutcomeUnknown,
    Overloaded,
    PreconditionFailed,
    QuorumNotReached,
    ServerError,
    Unreachable,
    Versioned,
)
from kvnode.topology.placement import Placement
from tests.drivers import Serve, served_members
from tests.harness import Cluster, ClusterFactory, Node, eventually, scrape, slow_uploads, stats, total

KEYS = [f"client-{index}" for index in range(30)]


def first_replicas(cluster: Cluster, keys: list[str], alive: set[str] | None = None) -> Counter[str]:
    """How many of ``keys`` have each node as their first replica (among ``alive`` nodes, if given)."""
    placement = Placement(cluster.urls)
    firsts: Counter[str] = Counter()
    for key in keys:
        order = [url for url in placement.order(key.encode()) if alive is None or url in alive]
        firsts[order[0]] += 1
    return firsts


def coordinated(nodes: Iterable[Node], op: str, status: str) -> Counter[str]:
    """How many ``op`` requests each of ``nodes`` answered with ``status``."""
    return Counter(
        {node.url: int(total(scrape(node), "kvnode_requests_total", op=op, status=status)) for node in nodes}
    )


async def test_put_get_delete_and_scan(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    async with Client(cluster[1].url) as kv:
        assert set(kv.members) == set(cluster.urls)
        odd = "a+b c/é&=?%"  # every character a query string treats specially, and UTF-8
        await kv.put(odd, b"odd")
        await kv.put("empty", b"")
        await kv.put("greeting", b"hello", ack=3, from_=3)
        assert await kv.get(odd) == b"odd"
        assert await kv.get("empty") == b""
        assert await kv.get("greeting", ack=1, from_=1) == b"hello"
        await kv.delete("greeting", ack=3)
        with pytest.raises(NotFound) as absent:
            await kv.get("greeting")
        assert absent.value.reason == "no such entity"
        for key, value in (("scan-b", b"2"), ("scan-a", b"1\nwith a newline"), ("scan-c", b"3")):
            await kv.put(key, value, ack=3)
        for node in cluster:  # with ack=3 every node holds every record
            records = [record async for record in kv.scan("scan-", "scan-c", node=node.url)]
            assert records == [("scan-a", b"1\nwith a newline"), ("scan-b", b"2")]
        assert [key async for key, _ in kv.scan("scan-")] == ["scan-a", "scan-b", "scan-c"]
    assert cluster[0].get(odd).body == b"odd"  # the key the node stored is the id's own UTF-8


async def test_bad_requests_and_server_answers_are_typed_errors(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, max_body_bytes=10)
    async with Client(*cluster.urls) as kv:
        with pytest.raises(BadRequest) as too_many:
            await kv.get("k", ack=3, from_=2)
        assert too_many.value.status == 400 and "exceeds" in too_many.value.reason
        with pytest.raises(BadRequest) as empty:
            await kv.put("", b"v")
        assert empty.value.status == 400 and "'id'" in empty.value.reason
        with pytest.raises(BadRequest) as large:
            await kv.put("k", b"x" * 11)
        assert large.value.status == 413
        with pytest.raises(BadRequest):
            _ = [record async for record in kv.scan("")]
    # A bad request is the caller's: asked once, on one node, never retried.
    assert sum(coordinated(cluster, "get", "400").values()) == 1


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
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


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


async def test_each_request_goes_to_a_replica_of_its_key(start_cluster: ClusterFactory) -> None:
    """With from=1 a key has one replica: a coordinator that is that replica calls only its own storage."""
    cluster = start_cluster(3)
    placement = Placement(cluster.urls)
    async with Client(cluster[0].url) as kv:
        for key in KEYS:
            assert kv.route(key) == placement.order(key.encode())
            await kv.put(key, b"v", ack=1, from_=1)
            assert await kv.get(key, ack=1, from_=1) == b"v"
    firsts = first_replicas(cluster, KEYS)
    assert len(firsts) == 3  # every node is the first replica of some keys
    for node in cluster:
        samples = scrape(node)
        for op, status in (("put", "201"), ("get", "200")):
            assert total(samples, "kvnode_requests_total", op=op, status=status) == firsts[node.url]
        for op in ("write", "read"):
            assert total(samples, "kvnode_replica_calls_total", op=op, peer=node.url) == firsts[node.url]
            assert total(samples, "kvnode_replica_calls_total", op=op) == firsts[node.url]  # no remote call


async def test_a_killed_member_is_routed_around(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    async with Client(cluster[0].url) as kv:
        for key in KEYS:
            await kv.put(key, key.encode(), ack=3)
        dead = cluster[2]
        dead.kill()
        alive = {node.url for node in cluster.running()}
        # Reads of the keys whose first replica died go to the next replica of each; nothing fails.
        for key in KEYS:
            assert await kv.get(key) == key.encode()
        assert coordinated(cluster.running(), "get", "200") == first_replicas(cluster, KEYS, alive)
        # Writes too: a refused connection surely wrote nothing, so the next replica takes the write.
        for key in KEYS:
            await kv.put(key, b"again")
        before, after = first_replicas(cluster, KEYS), first_replicas(cluster, KEYS, alive)
        expected = Counter({url: before[url] + after[url] for url in alive})
        assert coordinated(cluster.running(), "put", "201") == expected
        scanned = [key async for key, _ in kv.scan("client-")]  # the default node skips the dead one
        assert sorted(scanned) == sorted(KEYS)


async def test_failures_refresh_the_view_at_most_once_a_second(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, access_log=True)
    dead = cluster[2]
    keys = [key for key in KEYS if Placement(cluster.urls).order(key.encode())[0] == dead.url]
    async with Client(cluster[0].url) as kv:  # its first view
        for key in keys:
            await kv.put(key, b"v", ack=3)
        dead.kill()
        await asyncio.sleep(1.0)  # not synchronisation: the rate bound counts from the first view
        started = time.monotonic()
        # Every read's first try fails at once, together: many failures, one refresh.
        assert await asyncio.gather(*(kv.get(key) for key in keys)) == [b"v"] * len(keys)
        burst_s = time.monotonic() - started
        await eventually(lambda: views_served(cluster) >= 2)
    assert 2 <= views_served(cluster) <= 2 + int(burst_s)


def views_served(cluster: Cluster) -> int:
    """``GET /v0/cluster`` requests in the nodes' access logs."""
    return sum(node.log_path.read_text().count("GET /v0/cluster ") for node in cluster)


async def test_a_504_is_not_retried(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    async with Client(cluster[0].url) as kv:
        cluster[1].stop()
        cluster[2].stop()
        with pytest.raises(QuorumNotReached) as write:
            await kv.put("lonely", b"v", ack=2)
        assert write.value.url == cluster[0].url and "2" in write.value.reason
        with pytest.raises(QuorumNotReached):
            await kv.get("lonely", ack=2)
    # One PUT and one GET reached the only node left: a 504 may have been applied, so no second try.
    assert coordinated(cluster.running(), "put", "504")[cluster[0].url] == 1
    assert coordinated(cluster.running(), "get", "504")[cluster[0].url] == 1


async def test_a_frozen_member_fails_a_write_that_may_have_applied_but_not_a_read(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    frozen = cluster[2]
    key = next(key for key in KEYS if Placement(cluster.urls).order(key.encode())[0] == frozen.url)
    async with Client(cluster[0].url, timeout=2.0) as kv:
        await kv.put(key, b"before", ack=3)
        frozen.freeze()
        try:
            # The frozen node's kernel still accepts the connection: the request is sent, and not answered.
            with pytest.raises(Unreachable) as write:
                await kv.put(key, b"after")
            assert write.value.maybe_applied and write.value.url == frozen.url
            assert await kv.get(key, ack=1) == b"before"  # a read goes on to the next replica
        finally:
            frozen.resume()
    others = [node for node in cluster if node is not frozen]
    assert sum(coordinated(others, "put", "201").values()) == 0  # the write was not sent elsewhere
    assert sum(coordinated(others, "get", "200").values()) == 1


async def test_a_503_is_retried_after_its_retry_after(start_cluster: ClusterFactory) -> None:
    node = start_cluster(1, max_inflight=2)[0]
    assert node.put("read-me", b"value").status == 201
    async with Client(node.url) as kv, Client(node.url, attempts=1) as once:
        with slow_uploads(node, 2):  # holds both of the node's slots
            with pytest.raises(Overloaded) as shed:
                await once.get("read-me")
            assert shed.value.retry_after == 1.0 and "overloaded" in shed.value.reason
            started = time.monotonic()
            reading = asyncio.create_task(kv.get("read-me"))
            writing = asyncio.create_task(kv.put("write-me", b"written"))
            await eventually(lambda: shed_count(node) >= 3)
        # Both asked again once the slots were free, and not before the node's Retry-After: 1.
        assert await reading == b"value"
        await writing
        assert time.monotonic() - started >= 1.0
    assert shed_count(node) >= 3  # more only if the slots took over a second to free up
    assert node.get("write-me").body == b"written"


async def test_put_with_a_ttl_expires_and_a_bad_ttl_is_a_bad_request(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(1)
    async with Client(cluster[0].url) as kv:
        await kv.put("ttl", b"brief", ttl_ms=300)
        await eventually(lambda: cluster[0].get("ttl").status == 404)
        with pytest.raises(NotFound):
            await kv.get("ttl")
        with pytest.raises(BadRequest) as bad:
            await kv.put("ttl", b"v", ttl_ms=0)
        assert bad.value.status == 400 and "'ttl'" in bad.value.reason
        await kv.put("ttl", b"kept")  # without ttl_ms: permanent
        assert await kv.get("ttl") == b"kept"


def shed_count(node: Node) -> int:
    shed: dict[str, int] = stats(node)["requests"]["shed"]  # by reason
    return sum(shed.values())


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


async def test_a_conditional_writes_504_is_an_unknown_outcome_never_sent_twice(serve: Serve) -> None:
    """One member of three served: a round has no majority. A 504 is the same on every coordinator, so the
    client raises it at once; a serial read's 504 is a read's, QuorumNotReached."""
    (alone,) = await served_members(serve, 3, served=1)
    async with Client(alone.url) as kv:
        with pytest.raises(OutcomeUnknown) as unknown:
            await kv.put_if("k", b"v", None)
        assert unknown.value.url == alone.url
        assert unknown.value.reason.startswith("outcome unknown: no quorum in the prepare phase")
        with pytest.raises(QuorumNotReached) as read:
            await kv.get_versioned("k", serial=True)
        assert not isinstance(read.value, OutcomeUnknown)
    assert alone.parts.paxos.stats.rounds["unknown"] == 2  # the write once, the read once


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
