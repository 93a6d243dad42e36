"""kvnode.ops.data_dir: who holds a data dir, and a node started on one that another node holds, refused
with one line naming that process. Real node processes on loopback."""

from __future__ import annotations

from pathlib import Path

from kvnode.ops.data_dir import data_dir_holder
from kvnode.ops.ports import free_ports
from tests.harness import Node, assert_exit_2_with_one_line, run_kvnode


def test_a_running_node_holds_its_data_dir_until_it_stops(node: Node, tmp_path: Path) -> None:
    assert data_dir_holder(node.config.data_dir) == node.pid
    assert data_dir_holder(tmp_path / "never-used") is None
    node.stop()
    assert data_dir_holder(node.config.data_dir) is None


def test_a_node_on_a_data_dir_in_use_exits_2_naming_the_holder(node: Node, tmp_path: Path) -> None:
    port = free_ports(1)[0]
    args = ["node", "--port", str(port), "--data-dir", str(node.config.data_dir)]
    stderr = assert_exit_2_with_one_line(run_kvnode(args, tmp_path))
    expected = f"kvnode: data dir {node.config.data_dir} is in use by another kvnode process (pid {node.pid})"
    assert stderr == expected + "\n"
    assert node.put("k", b"still fine").status == 201  # the running node is unharmed
