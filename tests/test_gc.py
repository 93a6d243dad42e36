"""Tombstone GC on real node processes: tombstones and expired values dropped once their grace period is
over and every replica has repaired with the node since, their disk space given back, and tombstones
waiting for a repair counted (by the peer they wait for) in /metrics, /v0/stats and ``admin status``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness import ClusterFactory, Node, fresh_key, request, scrape, stats, total, wait_for
from tests.test_admin import admin

# The shortest grace period (the hint window may not be longer), and short bounds on how late a version
# can reach a replica, which GC waits for too (kvnode.repair.gc_rule).
GC = {"gc_grace_s": 1, "hint_window_s": 1, "timeout_ms": 500, "max_clock_skew_ms": 500}


def disk_bytes(node: Node) -> int:
    """The size of the node's client keyspace on disk (its records LevelDB)."""
    return sum(path.stat().st_size for path in Path(node.config.data_dir, "records").iterdir())


def gc_figures(node: Node) -> dict[str, Any]:
    figures: dict[str, Any] = stats(node)["gc"]
    return figures


def test_deleting_everything_gives_the_space_back_once_gc_ran(start_cluster: ClusterFactory) -> None:
    [node] = start_cluster(1, **GC)
    keys = [fresh_key("big") for _ in range(200)]
    for index, key in enumerate(keys):
        assert node.put(key, bytes([index % 256]) * 20_000).status == 201
    written = disk_bytes(node)
    assert written > 4_000_000
    for key in keys:
        assert node.delete(key).status == 202
    wait_for(lambda: gc_figures(node)["tombstones_dropped"] == len(keys), what="every tombstone dropped")
    wait_for(lambda: disk_bytes(node) < written / 2, what="the space reclaimed")
    assert [key for key in keys if node.get(key).status != 404] == []


def test_expired_values_are_dropped_like_tombstones(start_cluster: ClusterFactory) -> None:
    [node] = start_cluster(1, **GC)
    keys = [fresh_key("ttl") for _ in range(5)]
    for key in keys:
        reply = request(node.url, "PUT", "/v0/entity", {"id": key, "ttl": 100}, body=b"short-lived")
        assert reply.status == 201
    wait_for(lambda: gc_figures(node)["expired_dropped"] == len(keys), what="the expired values dropped")
    assert total(scrape(node), "kvnode_gc_dropped_total", kind="expired") == len(keys)
    assert gc_figures(node)["tombstones_dropped"] == 0


def test_tombstones_wait_for_a_repair_with_every_replica_and_are_counted(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, **GC)
    node = cluster[0]
    keys = [fresh_key("waits") for _ in range(4)]
    for key in keys:
        assert node.put(key, b"v", ack=3).status == 201
        assert node.delete(key, ack=3).status == 202
    peers = [cluster[1].url, cluster[2].url]
    wait_for(lambda: gc_figures(node)["waiting"] == len(keys), what="the tombstones counted as waiting")
    figures = gc_figures(node)
    assert figures["waiting_for"] == dict.fromkeys(peers, len(keys))
    assert figures["tombstones_dropped"] == 0
    samples = scrape(node)
    assert total(samples, "kvnode_gc_waiting") == len(keys)
    assert [total(samples, "kvnode_gc_waiting_for_repair", peer=peer) for peer in peers] == [len(keys)] * 2
    status = admin(node.url, "status")
    assert status.returncode == 0, status.stderr
    waiting = (
        f"{len(keys)} past their grace period wait for a repair with {peers[0]} ({len(keys)}), {peers[1]}"
    )
    assert waiting in status.stdout
