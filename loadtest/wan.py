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
wan.json and wan-p99.png (p99 and p50 by cluster and level, every round a point) to ``--out``.

It needs root, iproute2 and /dev/net/tun; where they are missing it says which in one line and exits 2.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kvnode
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
from loadtest.report import MIN_RUN_REQUESTS, MIN_RUN_S
from loadtest.windows import write_report
from loadtest.workload import Op, Workload

__all__ = ["SHAPES", "Shape", "Wan", "main", "report_lines"]

KIND = "kvwan"  # the bed's namespaces: kvwan-PID-ROLE
OPS: tuple[Op, ...] = ("put", "get")
ROUND_TRIP_PROBES = 50  # TCP connects a figure of the bed rests on
_PROBE_PORT = 7  # the bed's probes listen here, before any node does
_START_S = 8.0  # a guess at a cluster's start, fill and stop, for progress lines only


@dataclass(frozen=True)
class Shape:
    """A cluster measured: its members' roles in the bed (e: the client's datacenter, w: the other), and
    the levels it is asked at."""

    name: str
    roles: tuple[str, ...]
    levels: tuple[str, ...]

    @property
    def datacenters(self) -> tuple[str, ...]:
        """Each member's datacenter (--datacenters), () for one datacenter."""
        names = tuple("dc1" if role.startswith("e") else "dc2" for role in self.roles)
        return names if len(set(names)) > 1 else ()


SHAPES = (
    Shape("1 datacenter", ("e1", "e2", "e3"), ("quorum",)),
    Shape("2 datacenters", ("e1", "e2", "e3", "w1", "w2", "w3"), ("local_quorum", "quorum", "each_quorum")),
)
CLIENT = "client"
ADDRESSES = {
    **{f"e{host}": datacenter_address(0, host) for host in (1, 2, 3)},
    **{f"w{host}": datacenter_address(1, host) for host in (1, 2, 3)},
    CLIENT: datacenter_address(0, 100),
}
NEAR = frozenset(address for role, address in ADDRESSES.items() if role.startswith("e"))  # the client's


@dataclass
class Wan:
    """What was asked and what was measured (wan.json)."""

    round_trip_ms: float
    rate: float
    duration_s: float
    warmup_s: float
    rounds: int
    keys: int
    value_size: int
    cores: int
    command: str = ""
    when: str = ""
    bed: dict[str, Any] = field(default_factory=dict)  # round trips, the delay line's figures
    runs: list[dict[str, Any]] = field(default_factory=list)  # one per shape, level, op and round

    @property
    def planned_seconds(self) -> float:
        levels = sum(len(shape.levels) for shape in SHAPES)
        return self.rounds * (len(SHAPES) * _START_S + levels * (self.warmup_s + len(OPS) * self.duration_s))


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50 and p99 of some samples, in their unit.

    >>> percentiles([float(value) for value in range(1, 101)])
    {'p50': 50.5, 'p99': 99.01}
    """
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(statistics.median(values), 3), "p99": round(cuts[98], 3)}


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
    progress.advance(_START_S)
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


# --- the report ---------------------------------------------------------------------------------------


def _cells(wan: Wan) -> list[tuple[str, str]]:
    return [(shape.name, level) for shape in SHAPES for level in shape.levels]


def _runs(wan: Wan, cluster: str, ack: str, op: str) -> list[dict[str, Any]]:
    return [run for run in wan.runs if (run["cluster"], run["ack"], run["op"]) == (cluster, ack, op)]


def _median(runs: Sequence[dict[str, Any]], percentile: str) -> float:
    return float(statistics.median(run["latency_ms"][percentile] for run in runs))


def report_lines(wan: Wan) -> list[str]:
    """wan.md's words and tables, drawn from what was measured alone."""
    short = [run for run in wan.runs if run["duration_s"] < MIN_RUN_S]
    samples: dict[tuple[str, str, str], int] = {
        (cluster, ack, op): sum(run["requests"] for run in _runs(wan, cluster, ack, op))
        for cluster, ack in _cells(wan)
        for op in OPS
    }
    few = min(samples.values(), default=0) < MIN_RUN_REQUESTS
    title = "kvnode across a WAN: latency by consistency level, one datacenter against two"
    lines = [f"# Smoke check: {title}" if short or few else f"# {title}", ""]
    if short or few:
        lines += [
            f"Runs of {wan.duration_s:g} s at {wan.rate:g}/s, fewer than {MIN_RUN_REQUESTS:,} requests or "
            f"{MIN_RUN_S:g} s a figure: the bench ran end to end; these figures compare nothing.",
            "",
        ]
    lines += [f"- **{name}**: {value}" for name, value in _header(wan).items()]
    lines += ["", "## Latency", "", *_table(wan, samples)]
    if not (short or few):
        lines += ["", "## What it shows", "", *_conclusion(wan)]
    return lines


def _header(wan: Wan) -> dict[str, str]:
    bed = wan.bed
    within, through, across = (
        bed.get(name, {}) for name in ("within_ms", "through_line_at_0_ms", "across_ms")
    )
    line = bed.get("delay_line", {})
    return {
        "command": f"`{wan.command}`",
        "when": wan.when,
        "kvnode": kvnode.__version__,
        "bed": "hosts made of network namespaces, two datacenters (198.51.100.0/24, 203.0.113.0/24) "
        f"behind a router whose delay line holds each crossing packet {wan.round_trip_ms / 2:g} ms: a "
        f"round trip of {wan.round_trip_ms:g} ms between them (loadtest.netns, loadtest.wan_delay)",
        "round trips measured": f"TCP connects from the client, p50 / p99 of {ROUND_TRIP_PROBES}: within its "
        f"datacenter {_pair(within)} ms; across, the delay line holding nothing (its own cost) "
        f"{_pair(through)} ms; across, with the delay, {_pair(across)} ms",
        "delay line": f"{line.get('packets', 0):,} packets over the clusters' {line.get('wall_s', 0):g} s, "
        f"{line.get('cpu_s', 0):g} s of its CPU ({_share(line.get('cpu_s', 0), line.get('wall_s', 0))} of a "
        f"core); {line.get('late_over_1ms', 0):,} left over 1 ms after they "
        f"were due (the latest {line.get('latest_ms', 0):g} ms late), {line.get('dropped', 0)} dropped; "
        f"scheduled {line.get('scheduling', 'other')} (fifo: before every process of the hosts)",
        "clusters": "one datacenter of three members, N = 3; two datacenters of three, N = 3 in each; each "
        f"fresh in every one of {wan.rounds} rounds; async fan-out, the node's defaults otherwise",
        "load": f"open loop from the client's datacenter to its members only, round-robin; for each level an "
        f"uncounted {wan.warmup_s:g} s of PUT, then PUT, then GET at {wan.rate:g}/s for {wan.duration_s:g} s "
        f"each; {wan.keys} keys of {wan.value_size} bytes, filled first; latency from each request's "
        "intended send time",
        "machine": f"{wan.cores} cores (os.cpu_count()) shared by every member, the delay line, the "
        "generator and this script",
    }


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "n/a"


def _pair(figures: dict[str, float]) -> str:
    return f"{figures.get('p50', 0):.3f} / {figures.get('p99', 0):.3f}"


def _table(wan: Wan, samples: dict[tuple[str, str, str], int]) -> list[str]:
    rows = [
        "| cluster | ack | op | runs | requests | p50 (ms) | p99 (ms) | p99 of the runs (ms) | failed "
        "| INVALID |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cluster, ack in _cells(wan):
        for op in OPS:
            runs = _runs(wan, cluster, ack, op)
            if not runs:
                continue
            spread = ", ".join(f"{run['latency_ms']['p99']:.1f}" for run in runs)
            failed = sum(run["requests"] - run["succeeded"] for run in runs)
            invalid = sum(not run["valid"] for run in runs)
            rows.append(
                f"| {cluster} | {ack} | {op.upper()} | {len(runs)} | {samples[cluster, ack, op]:,} | "
                f"{_median(runs, 'p50'):.2f} | {_median(runs, 'p99'):.2f} | {spread} | {failed} | {invalid} |"
            )
    rows += ["", "p50 and p99: the median over the runs of each run's own; requests: every run's together."]
    return rows


def _conclusion(wan: Wan) -> list[str]:
    lines = []
    for op in OPS:
        single = _runs(wan, SHAPES[0].name, "quorum", op)
        local = _runs(wan, SHAPES[1].name, "local_quorum", op)
        remote = _runs(wan, SHAPES[1].name, "quorum", op)
        if not (single and local and remote):
            continue
        ratio = _median(local, "p99") / max(_median(single, "p99"), 0.001)
        verdict = "within" if ratio <= 2 else "NOT within"
        lines.append(
            f"- {op.upper()}: `local_quorum` p99 {_median(local, 'p99'):.2f} ms is {ratio:.2f}x the "
            f"one-datacenter cluster's `quorum` p99 {_median(single, 'p99'):.2f} ms: {verdict} 2x. "
            f"`quorum` across the two pays the WAN: p50 {_median(remote, 'p50'):.2f} ms against the "
            f"{wan.round_trip_ms:g} ms round trip."
        )
    return lines


def plot(wan: Wan, path: Path) -> None:
    """p99 and p50 of PUT and GET by cluster and level, every round a point, the round trip dotted."""
    from loadtest.plots import plot_samples

    cells = _cells(wan)
    short = {SHAPES[0].name: "1 DC", SHAPES[1].name: "2 DCs"}
    labels = [f"{short[cluster]}\n{ack}" for cluster, ack in cells]
    panels = [
        (
            f"{op.upper()} {percentile} (ms)",
            [
                [run["latency_ms"][percentile] for run in _runs(wan, cluster, ack, op)]
                for cluster, ack in cells
            ],
            wan.round_trip_ms,
        )
        for percentile in ("p99", "p50")
        for op in OPS
    ]
    plot_samples(
        path, labels, panels, f"Latency by consistency level, {wan.round_trip_ms:g} ms between datacenters"
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
