"""The compare scenarios: a fresh 3-node cluster on free loopback ports, healthy or with one bad replica.

- ``healthy``: three nodes; the load goes to all three.
- ``slow-replica``: node C answers its peers ``SLOW_REPLICA_DELAY_MS`` late. Peers reach C through a
  delaying TCP proxy (:mod:`loadtest.delay_proxy`): the cluster list names the proxy's address, and C
  listens behind it, known to the cluster by that address (``--advertise-url``). The load goes to A and
  B, so every request is coordinated by a healthy node that has C as one of its replicas for C's keys.
- ``replica-down``: node C is SIGKILLed after the fill; the load goes to A and B.

Every process is started and stopped by PID (SIGTERM, then SIGKILL) through :mod:`kvnode.local_cluster`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kvnode.config import FanoutMode, NodeConfig
from kvnode.local_cluster import (
    LocalCluster,
    NodeProcess,
    NodeStartError,
    ServerProcess,
    start_on_free_ports,
)

__all__ = ["SCENARIOS", "SLOW_REPLICA_DELAY_MS", "ScenarioCluster", "start_scenario"]

SCENARIOS = ("healthy", "slow-replica", "replica-down")
SLOW_REPLICA_DELAY_MS = 20
_HOST = "127.0.0.1"


@dataclass
class ScenarioCluster:
    """One scenario's running cluster: nodes A, B and C (and C's proxy), and the URLs to load."""

    scenario: str
    mode: FanoutMode
    servers: LocalCluster[ServerProcess]  # A, B, C, then the proxy in slow-replica
    load_urls: list[str]

    def after_fill(self) -> None:
        """Break the replica the scenario is about, once the store is filled."""
        if self.scenario == "replica-down":
            self.servers[2].kill()

    def stop(self) -> None:
        self.servers.stop()


def start_scenario(
    scenario: str, mode: FanoutMode, data_dir: Path, timeout_ms: int = 1000
) -> ScenarioCluster:
    """Start the scenario's cluster, with data and logs in ``data_dir``, and wait until it serves (on
    fresh ports if another process takes one first); RuntimeError with the logs' last lines if it
    does not come up."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario is one of {', '.join(SCENARIOS)}, got {scenario!r}")
    log_dir = data_dir / "logs"  # node output goes there, so the terminal shows only progress
    ports = 4 if scenario == "slow-replica" else 3
    try:
        return start_on_free_ports(ports, partial(_start, scenario, mode, data_dir, log_dir, timeout_ms))
    except NodeStartError as error:
        raise RuntimeError(f"{scenario}/{mode}: {error}\n{_log_tails(log_dir)}") from None


def _start(
    scenario: str, mode: FanoutMode, data_dir: Path, log_dir: Path, timeout_ms: int, ports: list[int]
) -> ScenarioCluster:
    urls = [f"http://{_HOST}:{port}" for port in ports[:3]]  # node C's entry is the proxy when slow

    def node(port: int, advertise_url: str = "") -> NodeProcess:
        config = NodeConfig(
            _HOST,
            port,
            data_dir / f"node-{port}",
            tuple(urls),
            fanout=mode,
            timeout_ms=timeout_ms,
            advertise_url=advertise_url,
        )
        return NodeProcess(config, log_dir / f"node-{port}.log")

    servers: list[ServerProcess]
    if scenario != "slow-replica":
        servers = [node(port) for port in ports]
    else:
        # C listens on ports[3]; the cluster (C included) knows it by the proxy's URL, urls[2], so C is
        # ready when it answers as itself through the proxy.
        proxy_port, node_c_port = ports[2], ports[3]
        proxy = [sys.executable, "-m", "loadtest.delay_proxy", "--listen", f"{_HOST}:{proxy_port}"]
        proxy += ["--target", f"{_HOST}:{node_c_port}", "--delay-ms", str(SLOW_REPLICA_DELAY_MS)]
        servers = [node(ports[0]), node(ports[1]), node(node_c_port, urls[2])]
        servers.append(ServerProcess(proxy, urls[2], log_dir / f"proxy-{proxy_port}.log"))
    cluster = LocalCluster(servers)
    cluster.start()
    return ScenarioCluster(scenario, mode, cluster, urls if scenario == "healthy" else urls[:2])


def _log_tails(log_dir: Path, lines: int = 5) -> str:
    return "\n".join(
        f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        for path in sorted(log_dir.glob("*.log"))
    )
