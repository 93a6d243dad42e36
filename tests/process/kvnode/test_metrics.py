"""kvnode.metrics' buckets and recent latency, and GET /metrics on real
nodes: Prometheus text that
prometheus_client's own parser reads, requests by operation and status (the known ones at 0 from the
start), every replica call a coordinator makes, hints pending for a stopped peer until it is back."""

from __future__ import annotations

from tests.harness import ClusterFactory, Node, Samples, request, scrape, total, wait_for


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def connected(node: Node, peer: str) -> bool:
    return value(scrape(node), "kvnode_peer_state", peer=peer, state="connected") == 1


def test_every_known_request_series_is_there_at_zero_before_the_first_request(node: Node) -> None:
    samples = scrape(node)
    known = {
        "get": (200, 400, 404, 503, 504),
        "put": (201, 400, 408, 413, 503, 504),
        "delete": (202, 400, 503, 504),
    }
    for op, statuses in known.items():
        for status in statuses:
            labels = {"op": op, "status": str(status)}
            assert ("kvnode_requests_total", frozenset(labels.items())) in samples, labels
            assert value(samples, "kvnode_requests_total", **labels) == 0
            assert value(samples, "kvnode_request_duration_seconds_bucket", le="+Inf", **labels) == 0
    assert total(samples, "kvnode_requests_total") == 0
    # Overload's series too (docs/overload.md), at zero: what the soak test reads is there to be read.
    for reason in ("requests", "bytes", "starved"):
        assert ("kvnode_requests_shed_total", frozenset({("reason", reason)})) in samples
    assert ("kvnode_peer_channel_drops_total", frozenset({("peer", node.url)})) in samples
    assert value(samples, "kvnode_starved") == 0


def test_requests_are_counted_and_timed_by_operation_and_status(node: Node) -> None:
    for i in range(3):
        assert node.put(f"m{i}", b"v").status == 201
    assert node.get("m0").status == 200
    assert node.get("m1").status == 200
    assert node.get("absent").status == 404
    assert node.delete("m2").status == 202
    assert request(node.url, "GET", "/v0/entity").status == 400
    samples = scrape(node)
    expected = {
        ("put", "201"): 3,
        ("get", "200"): 2,
        ("get", "404"): 1,
        ("delete", "202"): 1,
        ("get", "400"): 1,
    }
    for (op, status), count in expected.items():
        assert value(samples, "kvnode_requests_total", op=op, status=status) == count, (op, status)
        labels = {"op": op, "status": status}
        assert value(samples, "kvnode_request_duration_seconds_count", **labels) == count
        assert value(samples, "kvnode_request_duration_seconds_bucket", le="+Inf", **labels) == count
    assert total(samples, "kvnode_requests_total") == sum(expected.values())
    assert value(samples, "kvnode_inflight_requests") == 0
    for name in (
        "kvnode_event_loop_lag_seconds_count",
        "kvnode_clock_lead_seconds",
        "process_cpu_seconds_total",
    ):
        assert (name, frozenset()) in samples, name


def test_an_async_write_with_the_default_quorum_makes_three_replica_calls(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, fanout="async")
    coordinator = cluster[0]
    writes = 20
    for i in range(writes):
        assert coordinator.put(f"calls-{i}", b"v").status == 201
    # The third call of each write may end after the client's answer: wait for it to be counted.
    wait_for(
        lambda: total(scrape(coordinator), "kvnode_replica_calls_total", op="write") == 3 * writes,
        what="every replica call counted",
    )
    samples = scrape(coordinator)
    for member in cluster.urls:  # the coordinator's own storage is one of the replicas
        assert value(samples, "kvnode_replica_calls_total", peer=member, op="write", outcome="ok") == writes
        # Every call is timed: these writes, and any hint delivered (the first write to a peer not yet
        # connected keeps a hint, which its delivery may send before the write's answer removes it).
        calls = total(samples, "kvnode_replica_calls_total", peer=member)
        assert value(samples, "kvnode_replica_call_duration_seconds_count", peer=member) == calls
    assert total(samples, "kvnode_replica_calls_total", op="read") == 0


def test_hints_pending_for_a_stopped_peer_drop_to_zero_once_it_is_back(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    coordinator, stopped = cluster[0], cluster[2]
    # A node serves before its channels to the peers are open, and a write to a peer not yet connected
    # keeps a hint, which the delivery task may count as delivered after delivered_before is read.
    wait_for(lambda: all(connected(coordinator, node.url) for node in cluster.nodes[1:]), what="channels")
    assert coordinator.put("warm", b"v", ack=3).status == 201
    delivered_before = value(scrape(coordinator), "kvnode_hints_delivered_total", peer=stopped.url)
    stopped.stop()
    missed = 5
    for i in range(missed):
        assert coordinator.put(f"hinted-{i}", b"v").status == 201
    # The client is answered once 2 replicas stored the write: a write the stopped peer's closing channel
    # took may fail, and be hinted, only after that.
    wait_for(lambda: failed_writes(scrape(coordinator), stopped.url) >= missed, what="the writes to fail")
    samples = scrape(coordinator)
    assert failed_writes(samples, stopped.url) == missed
    assert value(samples, "kvnode_hints_pending", peer=stopped.url) == missed
    assert value(samples, "kvnode_hints_pending", peer=cluster[1].url) == 0
    stopped.start()
    wait_for(
        lambda: value(scrape(coordinator), "kvnode_hints_pending", peer=stopped.url) == 0,
        what="hints delivered",
    )
    samples = scrape(coordinator)
    assert value(samples, "kvnode_hints_delivered_total", peer=stopped.url) == delivered_before + missed
    assert connected(coordinator, stopped.url)


def failed_writes(samples: Samples, peer: str) -> float:
    calls = total(samples, "kvnode_replica_calls_total", peer=peer, op="write")
    return calls - value(samples, "kvnode_replica_calls_total", peer=peer, op="write", outcome="ok")
