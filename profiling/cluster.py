"""The cluster under profile: 3 kvnode processes on free loopback ports, some of them under memray.

Nodes are named n1, n2, n3 in cluster order; n1 is the coordinator the load is sent to.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvnode.cli import node_argv
from kvnode.config import FanoutMode, NodeConfig
from kvnode.local_cluster import NodeProcesses, free_ports
from profiling.children import Children

__all__ = ["ClusterError", "ProfiledCluster", "cpu_seconds", "loop_lag", "memray_argv"]

CLUSTER_SIZE = 3


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


@dataclass(frozen=True)
class ProfiledNode:
    name: str
    config: NodeConfig
    memray_output: Path | None

    @property
    def url(self) -> str:
        return self.config.url


class ProfiledCluster(NodeProcesses):
    """NodeProcesses whose children are kept by ``children``, log to files, and may run under memray."""

    def __init__(
        self,
        mode: FanoutMode,
        data_dir: Path,
        log_dir: Path,
        children: Children,
        memray_outputs: dict[str, Path] | None = None,
    ) -> None:
        ports = free_ports(CLUSTER_SIZE)
        urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
        self.nodes = [
            ProfiledNode(
                f"n{index}",
                NodeConfig(port=port, data_dir=data_dir / f"n{index}", cluster=urls, fanout=mode),
                (memray_outputs or {}).get(f"n{index}"),
            )
            for index, port in enumerate(ports, 1)
        ]
        super().__init__([node.config for node in self.nodes], log_dir)
        self.log_dir: Path = log_dir
        self.children = children

    @property
    def coordinator(self) -> ProfiledNode:
        return self.nodes[0]

    def pids(self) -> dict[str, int]:
        return {node.name: process.pid for node, process in zip(self.nodes, self.processes, strict=True)}

    def cpu_seconds(self) -> dict[str, float]:
        """Each node's CPU time so far (user + system, from /proc)."""
        return {name: cpu_seconds(pid) for name, pid in self.pids().items()}

    def select(self, names: Collection[str]) -> list[ProfiledNode]:
        return [node for node in self.nodes if node.name in names]

    def start(self) -> None:
        for node in self.nodes:
            argv = node_argv(node.config)
            if node.memray_output is not None:
                argv = memray_argv(argv, node.memray_output)
            self.processes.append(self.children.start(argv, log=self.log_dir / f"{node.name}.log"))

    def start_and_wait(self) -> None:
        self.start()
        not_ready = self.wait_ready()
        if not_ready:
            logs = "\n".join(self._log_tail(node) for node in self.nodes if node.url in not_ready)
            raise ClusterError(f"nodes did not start: {', '.join(not_ready)}\n{logs}")

    def _log_tail(self, node: ProfiledNode) -> str:
        path = self.log_dir / f"{node.name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return f"--- {path} (last lines)\n" + "\n".join(text.splitlines()[-15:])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc/PID/stat (0 where it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


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
