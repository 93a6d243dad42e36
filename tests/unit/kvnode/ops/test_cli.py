"""kvnode.ops.cli: each command handed over (a node, a local cluster, the admin tool, which starts without
the server), and a node refused with one line when another process holds its data dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvnode.config import NodeConfig
from kvnode.ops import cli
from kvnode.ops.cluster_config import ClusterConfig
from tests.harness import clean_env


@pytest.fixture(autouse=True)
def no_kvnode_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KVNODE_* variable of the caller's would configure the commands run in this process."""
    for name in os.environ.keys() - clean_env().keys():
        monkeypatch.delenv(name)


def test_node_and_cluster_are_handed_over_with_their_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[object] = []

    def run(config: object) -> int:
        ran.append(config)
        return 0

    monkeypatch.setattr("kvnode.node.serving.run_node", run)
    monkeypatch.setattr("kvnode.ops.local_cluster.run_cluster", run)
    assert cli.main(["node", "--port", "9000", "--data-dir", str(tmp_path / "n")]) == 0
    assert cli.main(["cluster", "--nodes", "2", "--data-dir", str(tmp_path / "c")]) == 0
    node, cluster = ran
    assert isinstance(node, NodeConfig) and (node.port, node.data_dir) == (9000, tmp_path / "n")
    assert isinstance(cluster, ClusterConfig) and (cluster.nodes, cluster.node.data_dir) == (
        2,
        tmp_path / "c",
    )
