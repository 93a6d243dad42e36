"""kvnode.local_cluster: a start that loses a port to another process is tried again on fresh ports, and
a node is ready only when its /v0/status names it. Real node processes on loopback."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from kvnode.config import NodeConfig, cluster_configs
from kvnode.local_cluster import (
    LocalCluster,
    NodeProcess,
    NodeStartError,
    free_ports,
    start_on_free_ports,
)
from tests.harness import Node


def test_a_port_taken_before_the_nodes_bind_is_retried_on_fresh_ports(tmp_path: Path) -> None:
    attempts: list[list[int]] = []
    thief = socket.socket()  # plays another program that binds a port between free_ports() and the node

    def start(ports: list[int]) -> LocalCluster[NodeProcess]:
        attempts.append(ports)
        if len(attempts) == 1:
            thief.bind(("127.0.0.1", ports[1]))
            thief.listen()
        configs = cluster_configs(NodeConfig(data_dir=tmp_path), ports)
        cluster = LocalCluster(
            NodeProcess(config, tmp_path / f"node-{config.port}.log") for config in configs
        )
        cluster.start()
        return cluster

    with thief:
        cluster = start_on_free_ports(3, start)
    try:
        assert len(attempts) == 2
        assert [node.config.port for node in cluster] == attempts[1]
        assert all(node.config.cluster == tuple(cluster.urls) for node in cluster)  # the whole list changed
        assert all(node.serves() for node in cluster)
        first_try = tmp_path / f"node-{attempts[0][1]}.log"
        assert "address already in use" in first_try.read_text().lower()
    finally:
        cluster.stop()


def test_a_failure_other_than_a_taken_port_is_not_retried(tmp_path: Path) -> None:
    calls = 0
    (tmp_path / "blocker").write_text("a file where a data dir should be\n")

    def start(ports: list[int]) -> None:
        nonlocal calls
        calls += 1
        node = NodeProcess(NodeConfig(port=ports[0], data_dir=tmp_path / "blocker"), tmp_path / "node.log")
        node.start()

    with pytest.raises(NodeStartError) as failure:
        start_on_free_ports(1, start)
    assert calls == 1
    assert not failure.value.port_taken
    assert "is not a directory" in failure.value.reason


def test_a_node_is_not_ready_while_another_process_answers_at_its_url(node: Node, tmp_path: Path) -> None:
    """The node listens on its own port, but its URL names the other node's: never ready, and stopped."""
    own_port = free_ports(1)[0]
    config = NodeConfig(port=own_port, data_dir=tmp_path / "impostor", advertise_url=node.url)
    impostor = NodeProcess(config, tmp_path / "impostor.log")
    with pytest.raises(NodeStartError, match="did not serve in time"):
        impostor.start(timeout=2.0)
    assert not impostor.running
    own = NodeProcess(dataclasses.replace(config, advertise_url=""), tmp_path / "own.log")
    own.start()  # the same node at its own URL is ready
    own.stop()
