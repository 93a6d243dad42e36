"""kvnode.config: node URLs and the configs of a cluster's nodes."""

from __future__ import annotations

import pytest

from kvnode.config import NodeConfig, node_url
from kvnode.ops.cluster_config import ClusterConfig


def test_node_urls_put_ipv6_addresses_in_brackets() -> None:
    assert node_url("198.51.100.1", 8080) == "http://198.51.100.1:8080"
    assert node_url("::1", 8080) == "http://[::1]:8080"
    configs = ClusterConfig(nodes=2, node=NodeConfig(host="::1", port=8080)).node_configs()
    assert [config.url for config in configs] == ["http://[::1]:8080", "http://[::1]:8081"]
    assert all(config.cluster == ("http://[::1]:8080", "http://[::1]:8081") for config in configs)


def test_machines_are_loopback_addresses_whose_members_share_a_client_port() -> None:
    cluster = ClusterConfig(node=NodeConfig(port=9000), machines=2, per_machine=3)
    configs = cluster.node_configs()
    assert [config.url for config in configs] == [
        f"http://127.0.0.{host}:{port}" for host in (1, 2) for port in (9001, 9002, 9003)
    ]
    assert {config.client_port for config in configs} == {9000}
    assert all(config.cluster == tuple(c.url for c in configs) for config in configs)
    assert configs[4].data_dir.name == "node-127.0.0.2-9002"
    assert cluster.client_urls() == ["http://127.0.0.1:9000", "http://127.0.0.2:9000"]


def test_a_client_port_is_another_port_than_the_nodes_own() -> None:
    with pytest.raises(ValueError, match="--client-port"):
        NodeConfig(port=9000, client_port=9000)
    with pytest.raises(ValueError, match="leave out --tls"):
        ClusterConfig(machines=2, tls=True)
