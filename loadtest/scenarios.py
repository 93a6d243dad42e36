"""The compare scenarios: a fresh 3-node cluster on free loopback ports, healthy or with one bad replica.

- ``healthy``: three nodes; the load goes to all three.
- ``slow-replica``: node C answers its peers ``SLOW_REPLICA_DELAY_MS`` late. Peers reach C through a
  delaying TCP proxy (:mod:`loadtest.delay_proxy`): the cluster list names the proxy's address, and C
  listens behind it, known to the cluster by that address (``--advertise-url``). The load goes to A and
  B, so every request is coordinated by a healthy node that has C as one of its replicas for C's keys.
- ``replica-down``: node C is SIGKILLed after the fill; the load goes to A and B.

Every process is started here and stopped here by PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvnode.config import FanoutMode, NodeConfig
from kvnode.local_cluster import (
    NodeProcesses,
    die_with_parent,
    free_ports,
    stop_processes,
    wait_until_serving,
)

__all__ = ["SCENARIOS", "SLOW_REPLICA_DELAY_MS", "ScenarioCluster", "start_scenario"]

SCENARIOS = ("healthy", "slow-replica", "replica-down")
SLOW_REPLICA_DELAY_MS = 20
_HOST = "127.0.0.1"
_READY_TIMEOUT = 30.0
_START_ATTEMPTS = 3


@dataclass
class ScenarioCluster:
    """One scenario's running cluster: the nodes, any helper processes, and the URLs to load."""

    scenario: str
    mode: FanoutMode
    nodes: NodeProcesses
    load_urls: list[str]
    log_dir: Path
    helpers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_helper(self, name: str, argv: list[str]) -> None:
        """Start a helper process, its output in ``log_dir/NAME.log`` like the nodes'."""
        with open(self.log_dir / f"{name}.log", "ab") as log:
            self.helpers.append(
                subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            )

    def log_tails(self, lines: int = 5) -> str:
        return "\n".join(
            f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            for path in sorted(self.log_dir.glob("*.log"))
        )

    def after_fill(self) -> None:
        """Break the replica the scenario is about, once the store is filled."""
        if self.scenario == "replica-down":
            victim = self.nodes.processes[-1]
            victim.kill()
            victim.wait()

    def stop(self) -> None:
        self.nodes.stop()
        stop_processes(self.helpers)


def start_scenario(
    scenario: str, mode: FanoutMode, data_dir: Path, timeout_ms: int = 1000
) -> ScenarioCluster:
    """Start the scenario's cluster and wait until it serves; RuntimeError if it never comes up.

    A port found free can be taken by another program before a node binds it (other tests share this
    machine), so a cluster that does not come up is stopped and tried again on new ports.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario is one of {', '.join(SCENARIOS)}, got {scenario!r}")
    for attempt in range(1, _START_ATTEMPTS):
        with contextlib.suppress(RuntimeError):
            return _start_once(scenario, mode, data_dir / f"attempt-{attempt}", timeout_ms)
    return _start_once(scenario, mode, data_dir / f"attempt-{_START_ATTEMPTS}", timeout_ms)


def _start_once(scenario: str, mode: FanoutMode, data_dir: Path, timeout_ms: int) -> ScenarioCluster:
    ports = free_ports(4)
    log_dir = data_dir / "logs"  # node output goes there, so the terminal shows only progress
    log_dir.mkdir(parents=True, exist_ok=True)
    urls = [f"http://{_HOST}:{port}" for port in ports[:3]]  # node C's entry is the proxy when slow

    def config(port: int, advertise_url: str = "") -> NodeConfig:
        return NodeConfig(
            _HOST,
            port,
            data_dir / f"node-{port}",
            tuple(urls),
            fanout=mode,
            timeout_ms=timeout_ms,
            advertise_url=advertise_url,
        )

    if scenario != "slow-replica":
        nodes = NodeProcesses([config(port) for port in ports[:3]], log_dir)
        cluster = ScenarioCluster(scenario, mode, nodes, urls if scenario == "healthy" else urls[:2], log_dir)
        nodes.start()
        return _ready(cluster, list(zip(urls, nodes.processes, strict=True)))

    # C listens on ports[3]; the cluster (C included) knows it by the proxy's URL, urls[2].
    proxy_port, node_c_port = ports[2], ports[3]
    nodes = NodeProcesses([config(ports[0]), config(ports[1]), config(node_c_port, urls[2])], log_dir)
    cluster = ScenarioCluster(scenario, mode, nodes, urls[:2], log_dir)
    proxy = [sys.executable, "-m", "loadtest.delay_proxy", "--listen", f"{_HOST}:{proxy_port}"]
    proxy += ["--target", f"{_HOST}:{node_c_port}", "--delay-ms", str(SLOW_REPLICA_DELAY_MS)]
    try:
        cluster.start_helper("proxy", proxy)
        nodes.start()
    except BaseException:
        cluster.stop()
        raise
    # C's own URL is the proxy's, so C is ready when it answers through the proxy.
    return _ready(cluster, [*zip(urls, nodes.processes, strict=True), (urls[2], cluster.helpers[0])])


def _ready(cluster: ScenarioCluster, watched: list[tuple[str, subprocess.Popen[bytes]]]) -> ScenarioCluster:
    deadline = time.monotonic() + _READY_TIMEOUT
    try:
        # The first that fails is enough: the proxy of a node that died would be polled to the deadline.
        down = next((url for url, process in watched if not wait_until_serving(url, process, deadline)), None)
    except BaseException:
        cluster.stop()
        raise
    if down is not None:
        cluster.stop()
        name = f"{cluster.scenario}/{cluster.mode}"
        raise RuntimeError(f"{name}: {down} did not start\n{cluster.log_tails()}")
    return cluster
