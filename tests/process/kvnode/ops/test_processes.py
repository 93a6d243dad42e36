"""kvnode.ops.processes: a node is ready only when its /v0/status names it. Real node processes on
loopback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvnode.config import NodeConfig
from kvnode.ops.ports import free_ports
from kvnode.ops.processes import NodeProcess, NodeStartError
from tests.harness import Node


def test_a_node_is_not_ready_while_another_process_answers_at_its_url(node: Node, tmp_path: Path) -> None:
    """The node listens on its own port, but its URL names the other node's: never ready, and stopped."""
    own_port = free_ports(1)[0]
    config = NodeConfig(port=own_port, data_dir=tmp_path / "impostor", advertise_url=node.url)
    impostor = NodeProcess(config, tmp_path / "impostor.log")
    with pytest.raises(NodeStartError, match="did not serve in time"):
        impostor.start(timeout=2.0)
    assert not impostor.running
    # The same node at its own URL is ready (with a data dir of its own: the impostor's stored a
    # membership under the other URL).
    own = NodeProcess(
        dataclasses.replace(config, advertise_url="", data_dir=tmp_path / "own"), tmp_path / "own.log"
    )
    own.start()
    own.stop()
