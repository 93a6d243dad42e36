"""Tombstone GC on real node processes: a deleted value stays deleted whatever order repairs, hints and
restarts come in; tombstones wait for a repair with every replica, counted by the peer they wait for
in /metrics, /v0/stats and ``admin status``; their disk space is given back; expired values go the same
way."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness import (
    ClusterFactory,
    Node,
    fresh_key,
    key_where,
    request,
    run_kvnode,
    scrape,
    stats,
    total,
    wait_for,
)
from tests.healing import GC, gc_figures, past_grace, repair, repair_all


def disk_bytes(node: Node) -> int:
    """The size of the node's client keyspace on disk (its records LevelDB)."""
    return sum(path.stat().st_size for path in Path(node.config.data_dir, "records").iterdir())


@pytest.mark.slow
def test_a_deleted_value_stays_deleted_whatever_order_repairs_hints_and_restarts_come_in(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, **GC)
    first, second, stale = cluster
    keys = [fresh_key("deleted") for _ in range(20)]
    for key in keys:
        assert first.put(key, b"doomed", ack=3).status == 201
    stale.stop()
    for key in keys:
        assert first.delete(key, ack=2).status == 202  # hinted for the stopped replica
    past_grace([first, second], len(keys))
    for node in (first, second):  # they repair with each other; the stopped replica is unreachable
        assert repair(node, tmp_path).returncode == 1
    wanted = {stale.url: len(keys)}
    wait_for(
        lambda: all(gc_figures(node)["waiting_for"] == wanted for node in (first, second)),
        what="the tombstones waiting for the stopped replica alone",
    )
    assert [gc_figures(node)["tombstones_dropped"] for node in (first, second)] == [0, 0]
    assert total(scrape(first), "kvnode_gc_waiting_for_repair", peer=stale.url) == len(keys)
    status = run_kvnode(["admin", "--url", first.url, "status"], tmp_path)
    assert f"{len(keys)} past their grace period wait for a repair with {stale.url} ({len(keys)})" in (
        status.stdout
    )

    first.stop()  # a restart: what GC waits for is in the repair marks, which a restart keeps
    first.start()
    stale.start()  # its hints have outlived the hint window: dropped, never delivered
    wait_for(lambda: stats(first)["hints"]["pending"] == {}, what="the old hints dropped")
    repair_all([stale, first, second], tmp_path)
    wait_for(
        lambda: all(gc_figures(node)["tombstones_dropped"] >= len(keys) for node in cluster),
        what="every replica's tombstones dropped",
    )
    assert [gc_figures(node)["waiting"] for node in cluster] == [0, 0, 0]

    stale.stop()
    stale.start()
    repair_all(list(cluster), tmp_path)  # a tombstone sent back by a replica that had not dropped it yet
    for node in cluster:
        assert [key for key in keys if node.get(key, ack=3).status != 404] == [], node.url


def test_deleting_everything_gives_the_space_back_once_repaired_and_collected(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, **GC)
    keys = [fresh_key("big") for _ in range(200)]
    for index, key in enumerate(keys):
        assert cluster[0].put(key, bytes([index % 256]) * 20_000, ack=3).status == 201
    written = [disk_bytes(node) for node in cluster]
    assert min(written) > 4_000_000
    for key in keys:
        assert cluster[0].delete(key, ack=3).status == 202
    past_grace(list(cluster), len(keys))
    repair_all(list(cluster), tmp_path)
    wait_for(
        lambda: all(disk_bytes(node) < size / 2 for node, size in zip(cluster, written, strict=True)),
        what="the space reclaimed on every node",
    )
    assert [gc_figures(node)["tombstones_dropped"] >= len(keys) for node in cluster] == [True] * 3


def test_expired_values_are_dropped_like_tombstones(start_cluster: ClusterFactory) -> None:
    [node] = start_cluster(1, **GC)
    keys = [fresh_key("ttl") for _ in range(5)]
    for key in keys:
        reply = request(node.url, "PUT", "/v0/entity", {"id": key, "ttl": 100}, body=b"short-lived")
        assert reply.status == 201
    wait_for(lambda: gc_figures(node)["expired_dropped"] == len(keys), what="the expired values dropped")
    assert total(scrape(node), "kvnode_gc_dropped_total", kind="expired") == len(keys)
    assert gc_figures(node)["tombstones_dropped"] == 0


def listed(node: Node, key: str) -> bool:
    """Whether node's own store holds a live version of key."""
    return bool(node.scan(key, key + "\x00"))


def test_a_tombstone_is_kept_while_a_replica_still_holds_the_value_it_deletes(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    """The repair marks say a replica received what this node held when a repair started; a tombstone
    that came later by read repair is not covered by them. GC asks the replicas before dropping."""
    cluster = start_cluster(3, **GC, repair_interval_s=10**7)  # no background repair: the test drives them
    first, second, third = cluster
    key = key_where(cluster.urls, "late", lambda order: order == cluster.urls)
    assert first.put(key, b"deleted value", ack=3).status == 201
    second.stop()
    third.stop()
    assert first.delete(key, ack=1).status == 202  # only the first holds the tombstone
    deleted = time.monotonic()
    time.sleep(1.5)  # the subject: the hints for the others outlive the 1 s hint window
    second.start()
    third.start()
    wait_for(lambda: stats(first)["hints"]["pending"] == {}, what="the hints dropped")
    time.sleep(max(0.0, deleted + 2.5 - time.monotonic()))  # past the rule's arrival bound (2 s)
    first.stop()
    assert repair(second, tmp_path).returncode == 1  # with the third only: both hold the value
    first.start()
    assert first.get(key, ack=2, from_=2).status == 404  # read repair gives the second the tombstone
    wait_for(lambda: not listed(second, key), what="the tombstone on the second")
    third.stop()
    assert repair(second, tmp_path).returncode == 1  # with the first only: both hold the tombstone
    third.start()
    # The second's repair marks now allow dropping the tombstone, but the third still holds the value.
    wait_for(lambda: gc_figures(second)["unconfirmed"] >= 2, what="two passes kept it unconfirmed")
    assert gc_figures(second)["tombstones_dropped"] == 0
    assert listed(third, key)
    repair_all([first, second, third], tmp_path)  # the third gets the tombstone
    wait_for(lambda: gc_figures(second)["tombstones_dropped"] >= 1, what="the tombstone dropped")
    for node in cluster:
        assert node.get(key, ack=3).status == 404
