"""kvnode.client against real node processes: every call and error, token-aware routing (seen in each
node's /metrics), a killed or frozen member routed around, and a 503's Retry-After honoured."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable

import pytest

from kvnode.client import (
    BadRequest,
    Client,
    NotFound,
    Overloaded,
    QuorumNotReached,
    Unreachable,
)
from kvnode.topology.placement import Placement
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
