"""A clock far off fences its node (docs/clock-fencing.md), with real node processes: one node of three a
minute ahead or behind never makes an acknowledged write or delete disappear; it answers writes 503 naming
its offset; the good nodes name it, never each other; restarted with a good clock it serves writes at once.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from typing import Any

import pytest

from kvnode.ops.flags import node_argv
from kvnode.storage.system_db import SystemDb
from tests.harness import Cluster, ClusterFactory, Node, fresh_key, request, scrape, stats, wait_for

MINUTE_MS = 60_000


def clock_of(node: Node) -> dict[str, Any]:
    clock: dict[str, Any] = stats(node)["clock"]
    return clock


def measured_all(cluster: Cluster) -> bool:
    return all(clock_of(node)["measured_peers"] == len(cluster.nodes) - 1 for node in cluster.running())


def settled(cluster: Cluster) -> None:
    """Wait until every node has measured every peer's clock (the channels connect at start)."""
    wait_for(lambda: measured_all(cluster), what="every node measured every peer's clock")


def admin_status(node: Node) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kvnode", "admin", "--url", node.url, "status"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout


def read_everywhere(cluster: Cluster, key: str) -> list[bytes | None]:
    """The key read through every node with the default quorum: its value, or None for 404."""
    found: list[bytes | None] = []
    for node in cluster:
        answer = node.get(key)
        assert answer.status in (200, 404), answer.text
        found.append(answer.body if answer.status == 200 else None)
    return found


@pytest.mark.parametrize("offset_ms", [MINUTE_MS, -MINUTE_MS], ids=["a-minute-ahead", "a-minute-behind"])
def test_a_node_far_off_loses_no_acknowledged_write_or_delete(
    start_cluster: ClusterFactory, offset_ms: int
) -> None:
    cluster = start_cluster(3, clock_offsets_ms=[offset_ms, 0, 0])
    bad, good = cluster[0], cluster[1]
    settled(cluster)
    for key in [fresh_key("sequence") for _ in range(3)]:
        # PUT/DELETE alternating through the good node and the bad one; every acknowledged one must be
        # what every node reads right after it, and a refused one must never come back.
        last: bytes | None = None
        steps = [(good, "put"), (bad, "put"), (good, "put"), (bad, "delete"), (good, "delete"), (bad, "put")]
        steps += [(good, "put"), (bad, "put"), (bad, "delete")]
        for step, (coordinator, op) in enumerate(steps):
            value = b"v%d" % step
            answer = coordinator.put(key, value) if op == "put" else coordinator.delete(key)
            if answer.status in (201, 202):
                last = value if op == "put" else None
            else:
                assert coordinator is bad and answer.status == 503, answer.text
            assert read_everywhere(cluster, key) == [last] * 3, f"after step {step}"
        assert last == b"v6"


@pytest.mark.parametrize("offset_ms", [MINUTE_MS, -MINUTE_MS], ids=["a-minute-ahead", "a-minute-behind"])
def test_the_bad_node_refuses_writes_naming_its_offset_and_the_good_ones_name_it(
    start_cluster: ClusterFactory, offset_ms: int
) -> None:
    cluster = start_cluster(3, clock_offsets_ms=[offset_ms, 0, 0])
    bad, good = cluster[0], [cluster[1], cluster[2]]
    settled(cluster)
    key = fresh_key("fenced")
    for answer in (bad.put(key, b"x"), bad.put(key, b"x", ack=1), bad.delete(key, ack=1)):
        assert answer.status == 503
        assert f"60.0 s {'ahead of' if offset_ms > 0 else 'behind'} the cluster's" in answer.text, answer.text
        assert "time source" in answer.text
        assert answer.text.count("\n") == 1
    assert all(node.scan(key, key + "\x00") == [] for node in cluster)  # nothing stored anywhere
    bad_clock = clock_of(bad)
    assert bad_clock["fenced"] is True
    assert abs(bad_clock["offset_ms"] - offset_ms) < 1000
    for node in good:
        clock = clock_of(node)
        assert clock["fenced"] is False
        assert clock["far"] == [bad.url]  # the bad one, never the other good one
        assert abs(clock["offset_ms"]) < 1000
        assert abs(clock["peer_offsets_ms"][bad.url] - offset_ms) < 1000
        assert bad.url in clock["summary"]
        # A good node's writes reach the bad node's storage: judged by the cluster's time, not its clock.
        assert node.put(key, b"from-" + node.url.encode(), ack=3, from_=3).status == 201
    cluster_view = json.loads(request(good[0].url, "GET", "/v0/cluster").body)
    assert cluster_view["clock"]["far"] == [bad.url]
    # admin status names the bad node's clock, seen from either side.
    assert f"clock: the clock of {bad.url} is beyond" in admin_status(good[0])
    assert "this node refuses to coordinate writes" in admin_status(bad)
    samples = scrape(bad)
    assert samples["kvnode_clock_fenced", frozenset()] == 1
    assert abs(samples["kvnode_clock_offset_seconds", frozenset()] - offset_ms / 1000) < 1
    assert scrape(good[0])["kvnode_clock_fenced", frozenset()] == 0
    assert "refusing to coordinate writes" in bad.log_path.read_text()
    for node in good:  # a good node's log names the bad clock, never its own
        log = node.log_path.read_text()
        assert f"clock fence: the clock of {bad.url}" in log
        assert "this node's clock" not in log


def test_restarted_with_a_good_clock_it_serves_writes_at_once(start_cluster: ClusterFactory) -> None:
    """Even with a clock floor persisted a minute ahead while its clock was wrong."""
    cluster = start_cluster(3, clock_offsets_ms=[MINUTE_MS, 0, 0])
    bad, good = cluster[0], cluster[1]
    settled(cluster)
    key = fresh_key("restarted")
    assert bad.put(key, b"refused").status == 503
    assert good.put(key, b"before").status == 201
    bad.stop()
    system = SystemDb.open(bad.config.data_dir)
    try:  # what an older node running a minute ahead would have left
        system.clock_floor.persist(time.time_ns() // 1000 + MINUTE_MS * 1000)
    finally:
        system.close()
    bad.config = dataclasses.replace(bad.config, clock_offset_ms=0)
    bad.argv = node_argv(bad.config)
    bad.start()
    answer = bad.put(key, b"after")  # no wait: the first write measures the peers first
    assert answer.status == 201, answer.text
    assert read_everywhere(cluster, key) == [b"after"] * 3
    assert clock_of(bad)["lead_ms"] < 1000
    assert good.put(key, b"later").status == 201
    assert read_everywhere(cluster, key) == [b"later"] * 3


def test_a_node_started_alone_a_minute_ahead_stamps_nothing_that_beats_a_later_write(
    start_cluster: ClusterFactory,
) -> None:
    """Issue 41's first hole: started while its peers were down, the node measured no one, so nothing
    fenced it; its ack=1 writes, stamped a minute ahead, beat the writes acknowledged after them. Now it
    refuses them (503, naming why) until its clock is checked, and every later write wins."""
    cluster = start_cluster(3, clock_offsets_ms=[MINUTE_MS, 0, 0])
    ahead, others = cluster[0], [cluster[1], cluster[2]]
    for node in cluster:
        node.stop()
    ahead.start()  # alone: /v0/status answers while its peers are down
    keys = [fresh_key("lone") for _ in range(5)]
    for key in keys:
        answer = ahead.put(key, b"early", ack=1)
        assert answer.status == 503, answer.text
        assert answer.text.startswith("clock unchecked: ") and answer.text.count("\n") == 1, answer.text
    for node in others:
        node.start()
    for key in keys:
        assert others[0].put(key, b"later", ack=2).status == 201
        assert read_everywhere(cluster, key) == [b"later"] * 3
    settled(cluster)
    assert clock_of(ahead)["fenced"] is True  # and now that it measured them, it is fenced
