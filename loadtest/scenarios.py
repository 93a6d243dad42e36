"""The compare scenarios: a fresh 3-node cluster on free loopback ports, healthy or with one bad replica.

- ``healthy``: three nodes; the load goes to all three.
- ``slow-replica``: node C answers its peers ``SLOW_REPLICA_DELAY_MS`` late. Peers reach C through a
  delaying TCP proxy (:mod:`loadtest.delay_proxy`): the cluster list names the proxy's address, and C
  listens behind it, known to the cluster by that address (``--advertise-url``). The load goes to A and
  B, so every request is coordinated by a healthy node that has C as one of its replicas for C's keys.
- ``replica-down``: node C is SIGKILLed after the fill; the load goes to A and B.

Every process is started and stopped by PID (SIGTERM, then SIGKILL) through :mod:`kvnode.ops.local_cluster`.
"""

from __future__ import annotations

import dataclasses
import sys
import urllib.parse
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kvnode.config import FanoutMode, NodeConfig
from kvnode.ops.local_cluster import LocalCluster, start_local_cluster
from kvnode.ops.processes import NodeProcess, NodeStartError, ServerProcess

__all__ = [
    "SCENARIOS",
    "SLOW_REPLICA_DELAY_MS",
    "ScenarioCluster",
    "behind_proxy",
    "delay_proxy",
    "start_scenario",
]

SCENARIOS = ("healthy", "slow-replica", "replica-down")
SLOW_REPLICA_DELAY_MS = 20
_HOST = "127.0.0.1"


@dataclass
class ScenarioCluster:
    """One scenario's running cluster: nodes A, B and C (and C's proxy), and the URLs to load."""

    scenario: str
    mode: FanoutMode
    servers: LocalCluster[NodeProcess]  # A, B, C (and C's proxy, a helper, in slow-replica)
    load_urls: list[str]

    def after_fill(self) -> None:
        """Break the replica the scenario is about, once the store is filled."""
        if self.scenario == "replica-down":
            self.servers[2].kill()

    def stop(self) -> None:
        self.servers.stop()


def start_scenario(
    scenario: str,
    mode: FanoutMode,
    data_dir: Path,
    timeout_ms: int = 1000,
    slow_delay_ms: int = SLOW_REPLICA_DELAY_MS,
    speculative_ceiling_ms: int | None = None,
) -> ScenarioCluster:
    """Start the scenario's cluster, with data and logs in ``data_dir``, and wait until it serves (on
    fresh ports if another process takes one first); RuntimeError with the logs' last lines if it
    does not come up. ``slow_delay_ms``: how late the slow replica answers its peers;
    ``speculative_ceiling_ms``: the nodes' ``--speculative-ceiling-ms`` (None: its default)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario is one of {', '.join(SCENARIOS)}, got {scenario!r}")
    log_dir = data_dir / "logs"  # node output goes there, so the terminal shows only progress
    base = NodeConfig(_HOST, data_dir=data_dir, fanout=mode, timeout_ms=timeout_ms)
    if speculative_ceiling_ms is not None:
        base = dataclasses.replace(base, speculative_ceiling_ms=speculative_ceiling_ms)
    slow = scenario == "slow-replica"
    try:
        servers = start_local_cluster(
            base,
            3,
            NodeProcess,
            log_dir=log_dir,
            spare_ports=1 if slow else 0,
            configure=behind_proxy if slow else None,
            helpers=partial(delay_proxy, log_dir, slow_delay_ms) if slow else None,
        )
    except NodeStartError as error:
        raise RuntimeError(f"{scenario}/{mode}: {error}\n{_log_tails(log_dir)}") from None
    return ScenarioCluster(
        scenario, mode, servers, servers.urls if scenario == "healthy" else servers.urls[:2]
    )


def behind_proxy(index: int, config: NodeConfig, spare_ports: list[int]) -> NodeConfig:
    """Node C listens on a spare port; the cluster (C included) knows it by its own URL, where the proxy
    listens, so C is ready when it answers as itself through the proxy."""
    if index != 2:
        return config
    return dataclasses.replace(config, port=spare_ports[0], advertise_url=config.url)


def delay_proxy(log_dir: Path, delay_ms: int, configs: list[NodeConfig]) -> list[ServerProcess]:
    """The delaying proxy in front of node C: on C's URL, to the port C listens on."""
    node_c = configs[2]
    listen = urllib.parse.urlsplit(node_c.url).port
    proxy = [sys.executable, "-m", "loadtest.delay_proxy", "--listen", f"{_HOST}:{listen}"]
    proxy += ["--target", f"{_HOST}:{node_c.port}", "--delay-ms", str(delay_ms)]
    return [ServerProcess(proxy, node_c.url, log_dir / f"proxy-{listen}.log")]


def _log_tails(log_dir: Path, lines: int = 5) -> str:
    return "\n".join(
        f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        for path in sorted(log_dir.glob("*.log"))
    )
