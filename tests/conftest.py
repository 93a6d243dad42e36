"""Fixtures: real kvnode processes on loopback, LevelDB in pytest's temporary directories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvnode.ops.processes import stop_together
from kvnode.storage.system_db import SystemDb
from tests.harness import Cluster, ClusterFactory, Node, launch_cluster


@pytest.fixture(autouse=True)
def no_loose_node_outlives_its_test() -> Iterator[None]:
    """Stop (SIGTERM, then SIGKILL) every node a test made by hand and left running (a newcomer, a node
    restarted with other flags, one a failed assertion left behind) once its fixtures are done."""
    yield
    stop_together([node for node in Node.loose if node.running])
    Node.loose.clear()


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[ClusterFactory]:
    """start_cluster(size, fanout="async", timeout_ms=1000, **NodeConfig options) -> a running Cluster.

    Every cluster started is stopped (SIGTERM, then SIGKILL) when the test ends.
    """
    started: list[Cluster] = []

    def start(size: int = 3, **options: object) -> Cluster:
        cluster = launch_cluster(tmp_path / f"cluster-{len(started)}", size, **options)  # type: ignore[arg-type]
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture
def node(start_cluster: ClusterFactory) -> Node:
    """One node, a cluster of one."""
    return start_cluster(1)[0]


@pytest.fixture
def system_db(tmp_path: Path) -> Iterator[SystemDb]:
    """A node's system database (kvnode.storage.system_db) in a fresh data dir, in this process."""
    db = SystemDb.open(tmp_path / "node")
    try:
        yield db
    finally:
        db.close()
