"""kvnode.config: node URLs and the configs of a cluster's nodes."""

from __future__ import annotations

from kvnode.config import NodeConfig, node_url
from kvnode.ops.cluster_config import ClusterConfig


def test_node_urls_put_ipv6_addresses_in_brackets() -> None:
    assert node_url("198.51.100.1", 8080) == "http://198.51.100.1:8080"
    assert node_url("::1", 8080) == "http://[::1]:8080"
    configs = ClusterConfig(nodes=2, node=NodeConfig(host="::1", port=8080)).node_configs()
    assert [config.url for config in configs] == ["http://[::1]:8080", "http://[::1]:8081"]
    assert all(config.cluster == ("http://[::1]:8080", "http://[::1]:8081") for config in configs)
