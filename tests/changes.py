"""Helpers for the membership-change tests (test_replace, test_join, test_join_undo, test_leave,
test_replication_factor): a cluster of machines on loopback, a node that joins or replaces, a bounded
writer, what a node says and holds, a change settled, and crash points."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self, TypeVar

import pytest

from kvnode.config import NodeConfig
from kvnode.ops.cluster_config import machine_placement
from kvnode.ops.local_cluster import start_local_cluster
from kvnode.ops.ports import free_ports
from kvnode.ops.processes import NodeStartError
from kvnode.topology.placement import Placement
from tests.harness import Cluster, Node, Response, clean_env, poll, wait_for, write_secret_file, written

T = TypeVar("T")

SECRET = "replace-test-secret-" * 2
FILL_KEYS = 100  # fill's keys on every member; half as many again on two: enough for every member to own some


def on_machines(
    tmp_path: Path, machines: int, per_machine: int, replication: int, datacenters: int = 0, zones: int = 0
) -> Cluster:
    """A running cluster of ``machines`` machines modelled on loopback (127.0.0.1, 127.0.0.2, ...: distinct
    hosts to placement) of ``per_machine`` members each, as ``cluster --machines`` runs them, with
    replication factor ``replication`` (in each datacenter), the cluster secret, and ``datacenters`` and
    ``zones`` (a datacenter) modelled as ``cluster --model-datacenters --model-zones`` does (0: not). Its
    nodes are loose (conftest stops them)."""
    secret = write_secret_file(tmp_path / "cluster.secret", SECRET)
    base = NodeConfig(data_dir=tmp_path, cluster_secret=SECRET.encode(), cluster_secret_file=secret)

    size = machines * per_machine
    return Cluster(
        start_local_cluster(
            base,
            size,
            Node,
            log_dir=tmp_path,
            configure=machine_placement(per_machine, replication, datacenters, zones),
        ).nodes
    )


def copies(nodes: Sequence[Node], keys: Sequence[str]) -> dict[str, list[str]]:
    """The nodes holding each key, by reading every node's /v0/entities."""
    holders: dict[str, list[str]] = {key: [] for key in keys}
    for node in nodes:
        for key in local_keys(node) & set(keys):
            holders[key].append(node.url)
    return holders


def newcomer(
    cluster: Cluster,
    tmp_path: Path,
    replaces: str = "",
    name: str = "newcomer",
    host: str = "127.0.0.1",
    datacenter: str = "",
) -> Node:
    """A node, not yet started, that joins through the cluster's first node (and replaces ``replaces``),
    on ``host`` (a machine modelled on loopback) in ``datacenter`` ("": the default)."""
    [port] = free_ports(1)
    base = cluster[0].config
    config = NodeConfig(
        host=host,
        datacenter=datacenter,
        port=port,
        data_dir=tmp_path / name,
        join=cluster[0].url,
        replace=replaces,
        cluster_secret=base.cluster_secret,
        cluster_secret_file=base.cluster_secret_file,
        timeout_ms=base.timeout_ms,
    )
    return Node(config, tmp_path / f"{name}.log")


class Writes:
    """Writes one after another in a thread of their own, from the start of a with block to its end
    (``limit`` at most, ``rate`` a second at most): the subclass's ``write(n)`` makes the n-th and keeps
    what it acknowledged."""

    limit = 5_000
    # Paced: as fast as it could, a writer took about half a core of the machine the suite shares (the
    # nodes' work and its own) for writes that prove nothing more than a few hundred a second do.
    rate = 250.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        count = 0
        start = time.monotonic()
        while not self._stop.is_set() and count < self.limit:
            self.write(count)
            count += 1
            self._stop.wait(start + count / self.rate - time.monotonic())  # at once when behind

    def write(self, count: int) -> None:
        raise NotImplementedError


class Writer(Writes):
    """Writes fresh keys through one node (ack=2) until stopped; keeps the ones acknowledged."""

    def __init__(self, node: Node, label: str) -> None:
        super().__init__()
        self.acknowledged: list[str] = []
        self._node, self._label = node, label

    def write(self, count: int) -> None:
        key = f"{self._label}-{count}"
        if self._node.put(key, key.encode(), ack=2).status == 201:
            self.acknowledged.append(key)


def local_keys(node: Node) -> set[str]:
    return {key.decode() for key, _ in node.scan("0")}  # every key of these tests sorts after "0"


def status_of(node: Node) -> dict[str, Any]:
    status = node.status()
    assert status is not None, f"{node.url} does not answer"
    return status


def crashing(node: Node, point: str) -> Node:
    """``node``, to be started with --crash-at POINT."""
    return Node(dataclasses.replace(node.config, crash_at=point), node.log_path)


def restarted_to_crash(node: Node, point: str) -> Node:
    """``node`` stopped, and started again with --crash-at POINT: the process that will end there."""
    node.stop()
    doomed = crashing(node, point)
    doomed.start()
    return doomed


def start_crashing(node: Node) -> None:
    with pytest.raises(NodeStartError):
        node.start()
    assert node.process is not None and node.process.wait(30) == 137


def versions(nodes: list[Node]) -> list[object]:
    return [status_of(node)["membership_version"] for node in nodes]


def run_node(node: Node) -> subprocess.CompletedProcess[str]:
    """Run ``node`` to completion as a user's shell would (for a node that must refuse to start)."""
    return subprocess.run(
        node.argv, env=clean_env(**node.extra_env), capture_output=True, text=True, timeout=60, check=False
    )


def fill(cluster: Cluster) -> tuple[list[str], list[str]]:
    """Keys on every member (written with ack=3 and the default from), and keys on two (from = 2); a
    write that timed out (504 on a busy machine) is written again until acknowledged."""
    everywhere = [f"all-{i}" for i in range(FILL_KEYS)]
    two = [f"two-{i}" for i in range(FILL_KEYS * 3 // 2)]
    coordinator = cluster[0]
    _each(everywhere, lambda key: poll(lambda: coordinator.put(key, key.encode(), ack=3), written))
    _each(two, lambda key: poll(lambda: coordinator.put(key, key.encode(), ack=2, from_=2), written))
    return everywhere, two


def assert_readable(nodes: list[Node], everywhere: list[str], two: Sequence[str] = ()) -> None:
    """Every key reads through every node: ``everywhere`` with the default quorum, ``two`` with from = 2. A
    read that timed out (504: too few replicas answered in time, on a busy machine) is asked again; any
    other answer is the one judged."""
    for node in nodes:

        def read(key: str, through: Node = node) -> Response:
            quorum = {"ack": 2, "from_": 2} if key in two else {}
            return poll(lambda: through.get(key, **quorum), lambda got: got.status != 504, what=f"{key} read")

        keys = [*everywhere, *two]
        answers = zip(keys, _each(keys, read), strict=True)
        unread = [(key, answer.status) for key, answer in answers if answer.body != key.encode()]
        assert not unread, f"{len(unread)} acknowledged keys do not read through {node.url}: {unread[:5]}"


def _each(keys: Sequence[str], request: Callable[[str], T]) -> list[T]:
    """``request`` for every key, a few at a time (the nodes serve them in parallel); the answers in order."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(request, keys))


def owned_by(
    url: str, members: Sequence[str], everywhere: Sequence[str], two: Sequence[str] = ()
) -> set[str]:
    """The keys of :func:`fill` (and the writers' keys, in ``everywhere``) that ``url`` owns among
    ``members`` of a cluster whose replication factor is 3 (a cluster started with three members)."""
    placement = Placement(members, replication=3)
    owned = {key for key in everywhere if url in placement.owners(key.encode())}
    return owned | {key for key in two if url in placement.owners(key.encode(), copies=2)}


def until_status(node: Node, holds: Callable[[dict[str, Any]], bool], what: str, seconds: float = 60) -> None:
    """Wait until the node's /v0/status ``holds``."""
    wait_for(lambda: holds(status_of(node)), seconds=seconds, what=f"{node.url}: {what}")


def settled(nodes: Sequence[Node], members: list[str]) -> None:
    """Wait until every node runs with ``members``, none of them joining."""
    for node in nodes:
        until_status(node, lambda status: status["cluster"] == members and not status["joining"], "settled")
