"""kvnode.ops.data_dir: who holds a data dir, and who holds a tree of them (``make reset``); a failed start
removes the data dir it made, unless it joined a cluster first. Real node processes on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.ops.data_dir import data_dir_holder, tree_holder
from kvnode.ops.data_dir import main as data_dir_main
from kvnode.ops.ports import free_ports
from tests.harness import Node, assert_exit_2_with_one_line, run_kvnode


def test_a_running_node_holds_its_data_dir_until_it_stops(node: Node, tmp_path: Path) -> None:
    assert data_dir_holder(node.config.data_dir) == node.pid
    assert data_dir_holder(tmp_path / "never-used") is None
    node.stop()
    assert data_dir_holder(node.config.data_dir) is None


def test_a_failed_start_removes_the_data_dir_it_made_and_only_that(tmp_path: Path) -> None:
    """A join to a seed where nothing listens fails, naming the cause and the fix; the data dir the start
    made is gone, with the parent it made, while one that was there before stays."""
    seed, port = (str(number) for number in free_ports(2))
    join = ["node", "--port", port, "--join", f"http://127.0.0.1:{seed}", "--data-dir"]
    stderr = assert_exit_2_with_one_line(run_kvnode([*join, str(tmp_path / "made" / "node")], tmp_path))
    assert stderr == (
        f"kvnode: the seed http://127.0.0.1:{seed} is unreachable (connection refused): check the --join "
        "URL, and that a node of the cluster runs there\n"
    )
    assert not (tmp_path / "made").exists()
    (tmp_path / "there").mkdir()
    assert_exit_2_with_one_line(run_kvnode([*join, str(tmp_path / "there")], tmp_path))
    assert (tmp_path / "there").is_dir()


def test_make_reset_is_refused_while_a_node_uses_the_tree(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make reset` runs `python -m kvnode.ops.data_dir data`: a node in a directory of it (as
    `make run`'s are in data/node-PORT) holds the whole tree."""
    tree = node.config.data_dir.parent
    assert tree_holder(tree) == node.pid
    assert data_dir_main([str(tree)]) == 1
    said = capsys.readouterr().err
    assert said == f"kvnode: {tree} is in use by pid {node.pid} (make run?): stop it first (Ctrl-C)\n"
    node.stop()
    assert tree_holder(tree) is None and data_dir_main([str(tree)]) == 0
