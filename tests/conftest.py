"""Fixtures: real kvnode processes on loopback, LevelDB in pytest's temporary directories; and the order
of the tests that keeps make test's four workers from setting a module's shared fixture up twice."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kvnode.ops.processes import stop_together
from kvnode.storage.system_db import SystemDb
from tests.drivers import Serve, served_nodes
from tests.entity_stub import Stub, serving_stub
from tests.harness import Cluster, ClusterFactory, Node, launch_cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules whose tests share a module-scoped fixture (a cluster, a smoke run) first, each in its
    own order. make test's work stealing (-n 4 --dist worksteal) hands each worker a contiguous quarter
    of the tests (these are about 100 of 1,700) and later moves tests only from the back of a worker's
    queue, so each of these modules runs whole on the first worker and sets its fixture up once (they are
    among the longest, too)."""
    shared = {item.nodeid.split("::", 1)[0] for item in items if _uses_a_module_fixture(item)}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in shared)  # stable: the order kept


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    fixtures = getattr(item, "_fixtureinfo", None)  # doctests and other non-function items may lack it
    return fixtures is not None and any(
        defs[-1].scope == "module" for defs in fixtures.name2fixturedefs.values()
    )


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
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    """serve(**NodeConfig options) -> a node served in this process (tests/drivers.py) until the test
    ends."""
    async with served_nodes(tmp_path) as start:
        yield start


@pytest.fixture
async def stub() -> AsyncIterator[tuple[Stub, str]]:
    """An in-process stand-in for a node's /v0/entity (tests/entity_stub.py), and its URL."""
    async with serving_stub() as served:
        yield served


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
