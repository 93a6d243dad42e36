"""Anti-entropy with real nodes: a replica that missed writes beyond the hint window converges with no
reads, on demand (``admin repair --wait``) and continuously; an idle healthy cluster moves no record; a
version written to fewer replicas is not spread to the others."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

from tests.harness import ClusterFactory, Node, fresh_key, key_where, run_kvnode, stats, wait_for

KEYS = 200


def listing(node: Node, prefix: str) -> dict[bytes, bytes]:
    """Node's own live records whose keys start with prefix."""
    return dict(node.scan(prefix, prefix + "\xff"))


def miss_writes_beyond_the_hint_window(
    cluster: list[Node], prefix: str
) -> tuple[dict[bytes, bytes], set[str]]:
    """Stop the third node for longer than the (1 s) hint window, then write KEYS keys and delete some
    written before: no hint is kept for it. Returns what every replica should list, and the deleted keys."""
    first, second, stale = cluster
    deleted = {f"{prefix}-deleted-{i}" for i in range(20)}
    for key in deleted:
        assert first.put(key, b"doomed", ack=3).status == 201
    stale.stop()
    wait_for(
        lambda: all(stats(n)["peers"][stale.url] != "connected" for n in (first, second)), what="seen gone"
    )
    time.sleep(1.2)  # the subject of the test: down longer than the hint window
    expected = {}
    for i in range(KEYS):
        key = f"{prefix}-{i}"
        assert (first if i % 2 else second).put(key, b"v%d" % i, ack=2).status == 201
        expected[key.encode()] = b"v%d" % i
    for key in deleted:
        assert first.delete(key, ack=2).status == 202
    assert all(stats(n)["hints"]["pending"] == {} for n in (first, second))  # nothing hinted for stale
    stale.start()
    return expected, deleted


def test_admin_repair_brings_a_replica_what_it_missed_beyond_the_hint_window(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, hint_window_s=1)
    prefix = fresh_key("missed")
    expected, deleted = miss_writes_beyond_the_hint_window(list(cluster), prefix)
    stale = cluster[2]
    assert listing(stale, prefix) == {key.encode(): b"doomed" for key in deleted}  # stale indeed
    result = run_kvnode(["admin", "--url", stale.url, "repair", "--wait", "--json"], tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["unreached"] == []
    received = sum(outcome["received"] for outcome in report["outcomes"].values())
    assert received == KEYS + 20  # the new keys and the tombstones, nothing else
    assert listing(stale, prefix) == expected  # the deleted keys gone, tombstones included
    summary = run_kvnode(["admin", "--url", stale.url, "repair", "--wait"], tmp_path)
    assert summary.returncode == 0
    assert "0 records sent, 0 received" in summary.stdout  # repaired: nothing differs any more


def test_continuous_anti_entropy_converges_with_no_reads(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, hint_window_s=1, repair_interval_s=1)
    prefix = fresh_key("continuous")
    expected, _ = miss_writes_beyond_the_hint_window(list(cluster), prefix)
    wait_for(lambda: listing(cluster[2], prefix) == expected, what="the stale replica repaired")


def completed_at_least(node: Node, count: int) -> bool:
    return bool(stats(node)["repair"]["exchanges"]["completed"] >= count)


def test_an_idle_healthy_cluster_moves_no_record(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, repair_interval_s=1)
    for i in range(50):
        assert cluster[i % 3].put(fresh_key("idle"), b"v", ack=3).status == 201
    before = [stats(node)["repair"] for node in cluster]
    # Every node completes two more exchanges with each peer after the last write was acknowledged.
    for node, was in zip(cluster, before, strict=True):
        wait_for(partial(completed_at_least, node, was["exchanges"]["completed"] + 4), what="more exchanges")
    after = [stats(node)["repair"] for node in cluster]
    for was, now in zip(before, after, strict=True):
        assert now["records"] == was["records"]
        assert now["segments_differing"] == was["segments_differing"]
        assert now["exchanges"]["failed"] == was["exchanges"]["failed"]


def test_a_version_written_to_fewer_replicas_stays_on_them(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, repair_interval_s=1)
    outsider = cluster[2]
    key = key_where(cluster.urls, "two", lambda order: order[2] == outsider.url)
    assert cluster[0].put(key, b"on two", ack=2, from_=2).status == 201
    result = run_kvnode(["admin", "--url", cluster[0].url, "repair", "--wait", "--json"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert listing(outsider, key) == {}
    assert stats(outsider)["repair"]["records"]["received"] == 0
