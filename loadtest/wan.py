"""``python -m loadtest wan``: what a WAN between two datacenters costs each consistency level, measured on
the WAN test bed (:mod:`loadtest.netns`: hosts made of network namespaces, a round trip of
``--round-trip-ms`` between two datacenters through :mod:`loadtest.wan_delay`).

    python -m loadtest wan [--round-trip-ms 50] [--rate 300] [--duration 20] [--rounds 3] [--out out/wan]

Two clusters in the same bed, each fresh in every round: one datacenter of three members (N = 3, asked at
``quorum``), and two datacenters of three (N = 3 in each, placed by ``--datacenters``) asked at
``local_quorum``, ``quorum`` and ``each_quorum``. The client sits in the first datacenter and sends to its
members only, round-robin (each owns every key), as an application beside its datacenter does. For each
cluster and level: an uncounted warm-up, then PUT at a constant rate from the open-loop generator
(:mod:`loadtest.openloop`: latency from each request's intended send time), then GET, each ``--duration``
seconds, over keys filled first. Before the clusters, the bed itself: TCP round trips within a datacenter,
across with the delay line holding nothing (its own cost), and across with the delay. Writes wan.md,
wan.json and wan-p99.png (p99 and p50 by cluster and level, every round a point; :mod:`loadtest.wan_report`)
to ``--out``.

It needs root, iproute2 and /dev/net/tun; where they are missing it says which in one line and exits 2.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kvnode.config import NodeConfig, ReplicationFactor, node_url
from kvnode.ops.argtypes import positive_float, positive_int
from kvnode.ops.local_cluster import LocalCluster, start_local_cluster
from kvnode.ops.netns import enter_namespace, inside, remove_leftovers, run_prefix
from kvnode.ops.parsing import OneLineParser
from kvnode.ops.processes import NodeProcess
from loadtest import interruptible
from loadtest.compare import Progress
from loadtest.fill import describe_failures, fill
from loadtest.netns import (
    NamespaceNetwork,
    connect_round_trips_ms,
    datacenter_address,
    listening_socket,
    unavailable,
)
from loadtest.openloop import run_rate
from loadtest.wan_figures import OPS, ROUND_TRIP_PROBES, SHAPES, START_S, Shape, Wan, percentiles
from loadtest.wan_report import plot, report_lines
from loadtest.windows import write_report
from loadtest.workload import Workload

__all__ = ["main", "measure"]

KIND = "kvwan"  # the bed's namespaces: kvwan-PID-ROLE
_PROBE_PORT = 7  # the bed's probes listen here, before any node does
CLIENT = "client"
ADDRESSES = {
    **{f"e{host}": datacenter_address(0, host) for host in (1, 2, 3)},
    **{f"w{host}": datacenter_address(1, host) for host in (1, 2, 3)},
    CLIENT: datacenter_address(0, 100),
}
NEAR = frozenset(address for role, address in ADDRESSES.items() if role.startswith("e"))  # the client's


def measure(wan: Wan, say: Callable[[str], None]) -> None:
    """The bed built, measured, and every shape's runs in every round, into ``wan``; everything made is
    removed at the end."""
    remove_leftovers(KIND)
    network = NamespaceNetwork(run_prefix(KIND))
    progress = Progress(wan.planned_seconds, "wan")
    try:
        network.build(ADDRESSES)
        network.delay(0)
        enter_namespace(network.name(CLIENT))  # this thread, and every thread and process it starts
        wan.bed = _measure_bed(network, wan.round_trip_ms, say)
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="kvnode-wan-") as data:
            for repeat in range(wan.rounds):
                for shape in SHAPES:
                    progress.say(f"{shape.name}: round {repeat + 1} of {wan.rounds}: a fresh cluster")
                    cluster = _start(network, shape, Path(data) / f"{repeat}-{len(shape.roles)}")
                    try:
                        _measure_shape(wan, shape, cluster, repeat, progress)
                    finally:
                        cluster.stop()
        wan.bed["delay_line"] = {**network.stop_delay(), "wall_s": round(time.monotonic() - began, 1)}
    finally:
        network.remove()


def _measure_bed(
    network: NamespaceNetwork, round_trip_ms: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """TCP round trips from the client: within its datacenter, across through the delay line holding
    nothing, then across with the delay."""
    near, far = ADDRESSES["e1"], ADDRESSES["w1"]
    listeners = [listening_socket(network.name(role), ADDRESSES[role], _PROBE_PORT) for role in ("e1", "w1")]
    try:
        within = percentiles(connect_round_trips_ms(near, _PROBE_PORT, ROUND_TRIP_PROBES))
        through = percentiles(connect_round_trips_ms(far, _PROBE_PORT, ROUND_TRIP_PROBES))
        line_at_0 = network.stop_delay()
        network.delay(round_trip_ms)
        across = percentiles(connect_round_trips_ms(far, _PROBE_PORT, ROUND_TRIP_PROBES))
    finally:
        for listener in listeners:
            listener.close()
    say(
        f"the bed: round trips within a datacenter p50 {within['p50']:.3f} ms, across through the delay "
        f"line at 0 ms p50 {through['p50']:.3f} ms, across at {round_trip_ms:g} ms p50 {across['p50']:.2f} ms"
    )
    return {"within_ms": within, "through_line_at_0_ms": through, "across_ms": across, "line_at_0": line_at_0}


def _start(network: NamespaceNetwork, shape: Shape, data: Path) -> LocalCluster[NodeProcess]:
    """``shape``'s cluster, each member in its host's namespace at its address, N = 3 in each datacenter."""
    roles = shape.roles
    role_at = {ADDRESSES[role]: role for role in roles}

    def configure(index: int, config: NodeConfig, _spare: list[int]) -> NodeConfig:
        ports = [urlsplit(url).port or 0 for url in config.cluster]
        urls = tuple(node_url(ADDRESSES[role], port) for role, port in zip(roles, ports, strict=True))
        return dataclasses.replace(
            config,
            host=ADDRESSES[roles[index]],
            cluster=urls,
            datacenters=shape.datacenters,
            replication_factor=ReplicationFactor(3),
        )

    def make(config: NodeConfig, log: Path | None) -> NodeProcess:
        node = NodeProcess(config, log)
        node.argv = inside(network.name(role_at[config.host]), node.argv)
        return node

    return start_local_cluster(
        NodeConfig(data_dir=data), len(roles), make, log_dir=data / "logs", configure=configure
    )


def _measure_shape(
    wan: Wan, shape: Shape, cluster: LocalCluster[NodeProcess], repeat: int, progress: Progress
) -> None:
    near = [node.url for node in cluster if node.config.host in NEAR]
    _, failures = interruptible.run(fill(near, Workload("put", wan.keys, wan.value_size)))
    if failures:
        raise RuntimeError(f"{shape.name}: the fill failed: {describe_failures(failures)}")
    progress.advance(START_S)
    for level in shape.levels:
        warmup = Workload("put", wan.keys, wan.value_size, ack=level, seed=repeat + 1)
        interruptible.run(run_rate(near, warmup, wan.rate, wan.warmup_s))
        progress.advance(wan.warmup_s)
        for op in OPS:
            workload = Workload(op, wan.keys, wan.value_size, ack=level, seed=repeat + 1)
            result = interruptible.run(run_rate(near, workload, wan.rate, wan.duration_s))
            progress.advance(wan.duration_s)
            run = {"cluster": shape.name, "ack": level, "round": repeat, **result.to_json()}
            wan.runs.append(run)
            progress.say(
                f"{shape.name}, ack={level}, {op.upper()}: p50 {run['latency_ms']['p50']:.2f} ms, p99 "
                f"{run['latency_ms']['p99']:.2f} ms of {result.requests} requests, {result.failed} failed"
            )


# --- the command ----------------------------------------------------------------------------------------


def _parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m loadtest wan", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--round-trip-ms", type=positive_float, default=50.0, help="between the datacenters (default: 50)"
    )
    parser.add_argument("--rate", type=positive_float, default=300.0, help="requests/s (default: 300)")
    parser.add_argument("--duration", type=positive_float, default=20.0, help="seconds a run (default: 20)")
    parser.add_argument(
        "--warmup", type=positive_float, default=3.0, help="seconds, not counted (default: 3)"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=3, help="fresh clusters, runs each (default: 3)"
    )
    parser.add_argument(
        "--keys", type=positive_int, default=1000, help="keys filled and drawn (default: 1000)"
    )
    parser.add_argument("--value-size", type=positive_int, default=100, help="bytes a value (default: 100)")
    parser.add_argument(
        "--out", type=Path, default=Path("out/wan"), help="report directory (default: out/wan)"
    )
    return parser


def main(argv: list[str], command: str) -> int:
    args = _parser().parse_args(argv)
    reason = unavailable(delay=True)
    if reason:
        print(f"loadtest wan: {reason}", file=sys.stderr)
        return 2
    wan = Wan(
        round_trip_ms=args.round_trip_ms,
        rate=args.rate,
        duration_s=args.duration,
        warmup_s=args.warmup,
        rounds=args.rounds,
        keys=args.keys,
        value_size=args.value_size,
        cores=os.cpu_count() or 1,
        command=command,
        when=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    measure(wan, lambda line: print(line, file=sys.stderr, flush=True))
    path = write_report(
        args.out, "wan", wan, report_lines(wan), lambda png: plot(wan, png), "latency by consistency level"
    )
    print(f"report: {path}")
    return 0
