"""The cluster under profile: 3 kvnode processes on free loopback ports, some of them under memray,
healthy or with a slow replica.

Nodes are named n1, n2, n3 in cluster order; n1 is the coordinator the load is sent to. In the
``slow-replica`` scenario n3 answers its peers ``SLOW_REPLICA_DELAY_MS`` late, behind the load tests'
delaying proxy, set up as their slow-replica scenario does (loadtest.scenarios): n1 stays healthy and
has n3 among the replicas of every key.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request
from collections.abc import Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

from kvnode.config import FanoutMode, NodeConfig
from kvnode.ops.flags import node_argv
from kvnode.ops.local_cluster import LocalCluster, start_local_cluster
from kvnode.ops.processes import NodeProcess, NodeStartError, cpu_seconds

# The load tests' own slow-replica set-up: n3 on a spare port, its URL served by the delaying proxy.
from loadtest.scenarios import SLOW_REPLICA_DELAY_MS, behind_proxy, delay_proxy

__all__ = [
    "SCENARIOS",
    "SLOW_REPLICA_DELAY_MS",
    "ClusterError",
    "ProfiledCluster",
    "ProfiledNode",
    "Scenario",
    "loop_lag",
    "memray_argv",
]

CLUSTER_SIZE = 3
Scenario = Literal["healthy", "slow-replica"]
SCENARIOS: tuple[Scenario, ...] = ("healthy", "slow-replica")


class ClusterError(RuntimeError):
    """The cluster did not come up."""


def memray_argv(argv: Sequence[str], output: Path) -> list[str]:
    """A ``python -m MODULE ...`` command line run under ``memray run`` instead, writing ``output``.

    Python allocators are traced (--trace-python-allocators): without it memray sees pymalloc's arenas,
    not the small objects a request creates. No --native: native unwinding on every allocation costs
    far more, and allocations in LevelDB or uvloop still show under the Python frame that called in.
    """
    if list(argv[1:2]) != ["-m"]:
        raise ValueError(f"expected 'python -m MODULE ...', got {' '.join(argv[:3])}")
    memray = ["-m", "memray", "run", "--quiet", "--force", "--trace-python-allocators", "-o", str(output)]
    return [argv[0], *memray, *argv[1:]]


class ProfiledNode(NodeProcess):
    """A node named n1, n2 or n3 after its data dir, perhaps run under memray (``memray_output`` is then
    its capture).

    It runs in a session of its own (a Ctrl-C reaches only the profiler, which stops its children in
    order) and logs to ``log_path``.
    """

    def __init__(self, config: NodeConfig, log_path: Path | None, memray_output: Path | None) -> None:
        argv = node_argv(config)
        if memray_output is not None:
            argv = memray_argv(argv, memray_output)
        super().__init__(config, log_path, argv=argv, new_session=True)
        self.name = config.data_dir.name
        self.memray_output = memray_output


class ProfiledCluster(LocalCluster[ProfiledNode]):
    """Three nodes on free loopback ports, data in ``DATA_DIR/NAME`` (so a second cluster on the same
    ``data_dir`` serves the first one's data); some of them under memray."""

    def __init__(
        self,
        mode: FanoutMode,
        data_dir: Path,
        log_dir: Path,
        memray_outputs: dict[str, Path] | None = None,
        scenario: Scenario = "healthy",
    ) -> None:
        super().__init__()
        self.mode = mode
        self.scenario = scenario
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.memray_outputs = memray_outputs or {}

    @property
    def coordinator(self) -> ProfiledNode:
        return self.nodes[0]

    def pids_by_name(self) -> dict[str, int]:
        return {node.name: node.pid for node in self.nodes}

    def cpu_seconds(self) -> dict[str, float]:
        """Each node's CPU time so far (user + system, from /proc)."""
        return {name: cpu_seconds(pid) for name, pid in self.pids_by_name().items()}

    def select(self, names: Collection[str]) -> list[ProfiledNode]:
        return [node for node in self.nodes if node.name in names]

    @property
    def ports(self) -> list[int]:
        """The nodes' ports as their members know them, then the ports they listen on behind a proxy:
        what start_and_wait needs to start this cluster again on its data."""
        known = [urllib.parse.urlsplit(node.url).port or 0 for node in self.nodes]
        return known + [node.config.port for node in self.nodes if node.config.advertise_url]

    def start_and_wait(self, ports: Sequence[int] = ()) -> None:
        """Start the nodes (on ``ports``, by default free ones, fresh ones again if another process takes
        one first) and wait until they serve; ClusterError with the failing node's last log lines if they
        do not."""
        names = [f"n{index}" for index in range(1, CLUSTER_SIZE + 1)]

        def node(config: NodeConfig, log_path: Path | None) -> ProfiledNode:
            return ProfiledNode(config, log_path, self.memray_outputs.get(config.data_dir.name))

        base = NodeConfig(fanout=self.mode, data_dir=self.data_dir)
        slow = self.scenario == "slow-replica"
        try:
            started = start_local_cluster(
                base,
                CLUSTER_SIZE,
                node,
                names=names,
                log_dir=self.log_dir,
                ports=ports,
                spare_ports=1 if slow else 0,
                configure=behind_proxy if slow else None,
                helpers=partial(delay_proxy, self.log_dir, SLOW_REPLICA_DELAY_MS) if slow else None,
            )
        except NodeStartError as error:
            raise ClusterError(f"{error}\n{_log_tail(error.log_path)}") from None
        self.nodes = started.nodes
        self.helpers = started.helpers


def _log_tail(path: Path | None) -> str:
    text = path.read_text(errors="replace") if path is not None and path.exists() else ""
    return f"--- {path} (last lines)\n" + "\n".join(text.splitlines()[-15:])


def loop_lag(url: str, *, reset: bool = False) -> dict[str, Any]:
    """The node's event-loop lag (``loop_lag_ms`` of /v0/stats); ``reset`` starts a new window after."""
    query = "?reset=1" if reset else ""
    try:
        with urllib.request.urlopen(f"{url}/v0/stats{query}", timeout=5.0) as response:
            stats = json.load(response)
    except (OSError, ValueError) as error:  # URLError is an OSError; ValueError: not JSON
        raise ClusterError(f"{url}/v0/stats did not answer: {error}") from None
    lag = stats.get("loop_lag_ms")
    if not isinstance(lag, dict):
        print(f"profiling: {url}/v0/stats has no loop_lag_ms", file=sys.stderr)
        return {}
    return lag
