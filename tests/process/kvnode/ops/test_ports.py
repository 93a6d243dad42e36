"""kvnode.ops.ports: free loopback ports, consecutive and below the kernel's ephemeral range, and a start
tried again on fresh ports when another process took one first (real node processes on loopback), and
only then."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kvnode.config import NodeConfig
from kvnode.ops.cluster_config import cluster_configs
from kvnode.ops.ports import start_on_free_ports
from kvnode.ops.processes import NodeProcess, NodeStartError, start_together, stop_together


def test_a_port_taken_before_the_nodes_bind_is_retried_on_fresh_ports(tmp_path: Path) -> None:
    attempts: list[list[int]] = []
    thief = socket.socket()  # plays another program that binds a port between free_ports() and the node

    def start(ports: list[int]) -> list[NodeProcess]:
        attempts.append(ports)
        if len(attempts) == 1:
            thief.bind(("127.0.0.1", ports[1]))
            thief.listen()
        configs = cluster_configs(NodeConfig(data_dir=tmp_path), ports)
        nodes = [NodeProcess(config, tmp_path / f"node-{config.port}.log") for config in configs]
        start_together(nodes)
        return nodes

    with thief:
        nodes = start_on_free_ports(3, start)
    try:
        assert len(attempts) == 2
        assert [node.config.port for node in nodes] == attempts[1]
        urls = tuple(node.url for node in nodes)
        assert all(node.config.cluster == urls for node in nodes)  # the whole list changed
        assert all(node.serves() for node in nodes)
        first_try = tmp_path / f"node-{attempts[0][1]}.log"
        assert "address already in use" in first_try.read_text().lower()
    finally:
        stop_together(nodes)


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
    assert failure.value.log_path == tmp_path / "node.log"
