"""loadtest.bench: its report's figures, and its servers: a real cluster started, filled and stopped."""

from __future__ import annotations

from pathlib import Path

from loadtest.bench import fill_cluster, format_latency, kvnode_cluster
from loadtest.workload import key_name
from tests.harness import request


def test_format_latency() -> None:
    assert format_latency(714e-6) == "0.71 ms"
    assert format_latency(0.0123) == "12.3 ms"
    assert format_latency(1.5) == "1,500 ms"


def test_kvnode_cluster_is_filled_then_stopped(tmp_path: Path) -> None:
    with kvnode_cluster("async", tmp_path) as nodes:
        assert len(nodes) == 3
        fill_cluster(nodes.urls, keys=40, value_size=7, concurrency=4)
        for url in nodes.urls:
            for index in (0, 39):
                response = request(url, "GET", "/v0/entity", {"id": key_name(index)})
                assert (response.status, len(response.body)) == (200, 7)
    assert not any(node.running for node in nodes)
