"""kvnode.config: node URLs, and what a node's config refuses."""

from __future__ import annotations

import pytest

from kvnode.config import NodeConfig, node_url


def test_node_urls_put_ipv6_addresses_in_brackets() -> None:
    assert node_url("198.51.100.1", 8080) == "http://198.51.100.1:8080"
    assert node_url("::1", 8080) == "http://[::1]:8080"
    assert NodeConfig(host="::1", port=8080).url == "http://[::1]:8080"


def test_a_client_port_is_another_port_than_the_nodes_own() -> None:
    with pytest.raises(ValueError, match="--client-port"):
        NodeConfig(port=9000, client_port=9000)
