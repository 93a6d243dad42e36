"""Fixtures: real kvnode processes on loopback, LevelDB in pytest's temporary directories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Cluster, ClusterFactory, Node, launch_cluster


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
