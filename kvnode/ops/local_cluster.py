"""Several kvnode nodes on this machine: :func:`start_local_cluster`, the one way a cluster is started on
free loopback ports (by the tests, the benchmark, the load scenarios and the profiler), and the
``cluster`` command (:func:`run_cluster`).

>>> nodes = start_local_cluster(NodeConfig(data_dir=tmp), 3, NodeProcess)  # doctest: +SKIP
>>> nodes.urls  # each node serves as itself, or all stopped + NodeStartError  # doctest: +SKIP
>>> nodes.stop()  # SIGTERM, then SIGKILL after a deadline                   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from kvnode.config import NodeConfig
from kvnode.ops.certs import CertificatesUnavailable
from kvnode.ops.cluster_config import ClusterConfig, cluster_configs, member_configs, stored_membership
from kvnode.ops.data_dir import ClusterPidFile, ClusterRunning
from kvnode.ops.flags import read_cluster_secret, unknown_variables
from kvnode.ops.ports import free_ports, start_on_free_ports
from kvnode.ops.processes import (
    READY_TIMEOUT,
    STOP_TIMEOUT,
    NodeProcess,
    NodeStartError,
    ServerProcess,
    start_together,
    stop_together,
)
from kvnode.replica.channel.handshake import create_secret_file
from kvnode.topology.membership import Membership

__all__ = ["LocalCluster", "run_cluster", "start_local_cluster"]

S = TypeVar("S", bound=ServerProcess)
_POLL_S = 0.05
N = TypeVar("N", bound=NodeProcess)


class LocalCluster(Generic[S]):
    """Nodes started and stopped together, and the helper servers they need (a proxy in front of one)."""

    def __init__(self, nodes: Iterable[S] = (), helpers: Iterable[ServerProcess] = ()) -> None:
        self.nodes = list(nodes)
        self.helpers = list(helpers)

    def __iter__(self) -> Iterator[S]:
        return iter(self.nodes)

    def __getitem__(self, index: int) -> S:
        return self.nodes[index]

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def pids(self) -> list[int]:
        return [node.pid for node in self.nodes]

    def start(self, timeout: float = READY_TIMEOUT, cancel: threading.Event | None = None) -> None:
        """Start every process and wait until each serves (see :func:`start_together`) and each node
        knows whether its data is whole: a new cluster's nodes learn it from each other at once, and
        a read through one that does not know yet would fail."""
        deadline = time.monotonic() + timeout
        start_together([*self.nodes, *self.helpers], timeout, cancel)
        waiting = [node for node in self.nodes if isinstance(node, NodeProcess)]
        while waiting and not (cancel is not None and cancel.is_set()):
            waiting = [node for node in waiting if not node.data_known()]
            if waiting and time.monotonic() > deadline:
                self.stop()
                late = waiting[0]
                reason = f"kvnode: {late.url} did not learn from any peer whether its data is whole"
                raise NodeStartError(late.url, reason, late.log_path)
            time.sleep(_POLL_S)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM every process still running (SIGCONT first if frozen), SIGKILL those left after
        ``timeout``."""
        stop_together([*self.nodes, *self.helpers], timeout)


def start_local_cluster(
    base: NodeConfig,
    size: int,
    make_node: Callable[[NodeConfig, Path | None], N],
    *,
    names: Sequence[str] = (),
    log_dir: Path | None = None,
    spare_ports: int = 0,
    configure: Callable[[int, NodeConfig, list[int]], NodeConfig] | None = None,
    helpers: Callable[[list[NodeConfig]], list[ServerProcess]] | None = None,
    ports: Sequence[int] = (),
) -> LocalCluster[N]:
    """A running cluster of ``size`` nodes made by ``make_node(config, log_path)`` on free loopback ports:
    every node is given the same member list, node i keeps its data in ``base.data_dir / NAME`` (NAME is
    ``names[i]``, by default ``node-PORT``) and writes its output to ``log_dir / NAME.log`` (without a
    log dir, to this process's stderr once it serves).

    ``configure(i, config, spare)`` changes node i's config before it starts, given ``spare_ports`` more
    free ports (a node may listen on one behind a proxy); ``helpers(configs)`` are more servers started
    with the nodes (that proxy). When another process takes one of the ports first, the cluster is
    started again on fresh ports (:func:`start_on_free_ports`); any other failure raises NodeStartError.
    With ``ports`` (the nodes' and the spare ones) it starts on those, once: a cluster started again on
    its data dirs keeps its URLs, which its members stored (kvnode.topology.membership).
    """

    def start(ports: list[int]) -> LocalCluster[N]:
        node_ports, spare = ports[:size], ports[size:]
        labels = list(names) or [f"node-{port}" for port in node_ports]
        configs = cluster_configs(base, node_ports, [base.data_dir / label for label in labels])
        if configure is not None:
            configs = [configure(index, config, spare) for index, config in enumerate(configs)]
        cluster = LocalCluster(
            (
                make_node(config, None if log_dir is None else log_dir / f"{label}.log")
                for config, label in zip(configs, labels, strict=True)
            ),
            helpers(configs) if helpers is not None else (),
        )
        cluster.start()
        return cluster

    if ports:
        return start(list(ports))
    return start_on_free_ports(size + spare_ports, start)


def run_cluster(config: ClusterConfig) -> int:
    """The ``cluster`` command: start the nodes, report each one's URL and PID once every one serves as
    itself, and stop them all on Ctrl-C or SIGTERM. A node that cannot start (its port taken, its data
    dir locked or unusable) ends the command: the others are stopped, its one line is printed, and the
    exit status is 2. Nothing is reported ready unless all of its own nodes are. A second command on the
    same data dir is refused, naming the first (DATA_DIR/cluster.pid). Without a cluster secret, it
    keeps one of its own in DATA_DIR/cluster.secret, the same on every start. A new cluster that fails to
    start leaves the data dir as it found it: its secret and its nodes' dirs would otherwise hold a
    membership on the refused ports, which the next start, on other ports, would run instead."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # main() has warned about them once; each node would warn again.
    for name in unknown_variables(os.environ):
        del os.environ[name]
    data_dir = config.node.data_dir
    found = _entries(data_dir)
    pid_file = ClusterPidFile(data_dir)
    try:
        pid_file.acquire()
    except ClusterRunning as error:
        print(f"kvnode: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"kvnode: cannot keep the pid file {pid_file.path}: {error.strerror}", file=sys.stderr)
        return 2
    stored = stored_membership(data_dir)
    try:
        status = _start(config, stop, stored)
    finally:
        pid_file.release()
    if status == 2 and stored is None:
        _leave_as_found(data_dir, found)
    return status


def _start(config: ClusterConfig, stop: threading.Event, stored: Membership | None) -> int:
    """The cluster started and served until ``stop``; 2 (its one line printed) if it could not start."""
    secret_path = None
    if not config.node.cluster_secret:
        secret_path = config.node.data_dir / "cluster.secret"
        try:
            secret = _own_secret(secret_path)
        except ValueError as error:
            print(f"kvnode: {error}", file=sys.stderr)
            return 2
        config = dataclasses.replace(config, node=dataclasses.replace(config.node, cluster_secret=secret))
    configs = _configs(config, stored)
    if config.tls:
        try:
            config.certificates.make(f"node-{node.port}" for node in configs)
        except (CertificatesUnavailable, OSError) as error:
            reason = error.strerror if isinstance(error, OSError) else str(error)
            print(f"kvnode: cannot make certificates in {config.certificates.directory}: {reason}",
                  file=sys.stderr)  # fmt: skip
            return 2
    return _serve(config, configs, secret_path, stop, fresh=stored is None)


def _entries(data_dir: Path) -> set[str] | None:
    """What the data dir holds (None: it does not exist)."""
    return {entry.name for entry in data_dir.iterdir()} if data_dir.is_dir() else None


def _leave_as_found(data_dir: Path, found: set[str] | None) -> None:
    """Remove what a failed first start made in the data dir (the data dir itself, if it made that)."""
    if found is None:
        shutil.rmtree(data_dir, ignore_errors=True)
        return
    for entry in _entries(data_dir) or set():
        if entry not in found:
            path = data_dir / entry
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _configs(config: ClusterConfig, stored: Membership | None) -> list[NodeConfig]:
    """The nodes to run: the members of the membership stored in the data dir (nodes added or removed
    since its first start included), else ``--nodes`` new ones. Says so when they are not the latter."""
    default = config.node_configs()
    if stored is None:
        return default
    configs, elsewhere = member_configs(config, stored)
    if [node.url for node in configs] != [node.url for node in default] or elsewhere:
        not_here = f"; not run here: {', '.join(elsewhere)}" if elsewhere else ""
        print(
            f"kvnode: {config.node.data_dir} holds a cluster of {len(stored.urls)} (membership version "
            f"{stored.version}): running its members{not_here}",
            flush=True,
        )
    return configs


def _own_secret(path: Path) -> bytes:
    """The cluster's own secret, created (0600) unless the file exists; ValueError with one line if it
    cannot be used (the same checks as --cluster-secret-file)."""
    try:
        create_secret_file(path)
    except OSError as error:
        raise ValueError(f"cannot keep the cluster secret in {path}: {error.strerror}") from None
    return read_cluster_secret(path, {})


def _serve(
    config: ClusterConfig,
    configs: list[NodeConfig],
    secret_path: Path | None,
    stop: threading.Event,
    *,
    fresh: bool,
) -> int:
    nodes = LocalCluster(NodeProcess(node) for node in configs)
    try:
        try:
            nodes.start(cancel=stop)
        except NodeStartError as error:
            print(error.reason + (_port_advice(config, configs, fresh) if error.port_taken else ""),
                  file=sys.stderr)  # fmt: skip
            return 2
        if stop.is_set():
            return 0
        print(f"kvnode cluster of {len(configs)} ready ({config.node.fanout} fan-out):", flush=True)
        for node in nodes:
            print(f"  {node.url}  pid {node.pid}", flush=True)
        if config.machines:
            machines = ", ".join(config.client_urls())
            print(f"{config.machines} machines, a client URL each (shared by its members): {machines}")
        if secret_path is not None:
            print(f"The cluster secret is in {secret_path} (nodes that join: --cluster-secret-file).")
        if config.tls:
            print(f"Clients verify the nodes with the CA {config.certificates.ca} (curl --cacert).")
        print("Ctrl-C stops every node.", flush=True)
        return _watch(nodes, stop)
    finally:
        nodes.stop()


def _port_advice(config: ClusterConfig, configs: list[NodeConfig], fresh: bool) -> str:
    """What to do about a port another process holds: a new cluster can start on others (a free range
    named), a stored one's members keep their URLs."""
    if not fresh:
        return (
            f": another process holds the port, and the members {config.node.data_dir} stores keep "
            "their URLs: stop that process (or start afresh in another --data-dir)"
        )
    span = max(node.port for node in configs) - config.node.port + 1
    return (
        f": another process holds the port; the cluster takes {span} consecutive ports from --port "
        f"{config.node.port}: start it on others, e.g. --port {free_ports(span)[0]}"
    )


def _watch(nodes: LocalCluster[NodeProcess], stop: threading.Event) -> int:
    """Until ``stop`` is set, say so when a node exits; 1 if every node has exited."""
    running = list(nodes)
    while running and not stop.wait(0.5):
        for node in [node for node in running if not node.running]:
            running.remove(node)
            status = node.process.returncode if node.process is not None else None
            print(f"kvnode: node {node.url} exited with status {status}", file=sys.stderr)
    return 0 if running else 1
