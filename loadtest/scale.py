"""``python -m loadtest scale``: one constant-rate load on clusters of several shapes, and what each request
costs in each: throughput, p99, replica calls per request, server CPU per request.

    python -m loadtest scale [--members 3,6,12] [--per-host N]   # hosts of N members (default: one a core)
    python -m loadtest scale --machines 3 [--per-host 1,4]       # 3 machines of 1, then of 4 members

Hosts are modelled on loopback (127.0.0.1, 127.0.0.2, ...: distinct hosts to placement), filled in order as
``cluster --machines`` fills them (:func:`kvnode.ops.cluster_config.machine_placement`); every shape has
the same replication factor (3 by default), so every request asks from = 3 replicas however many members
there are. ``--repeats`` rounds, each shape in turn in each, so that a slow spell of the machine falls on
every shape alike rather than on the one measured then; in a round, for each shape, on a fresh cluster:
fill the keys, read the idle cluster's CPU over a few seconds, send a warm-up run, then one run at
``--rate`` from the open-loop generator (:mod:`loadtest.workers`), token-aware (each request to its key's
first owner, as kvnode.client routes), with the node processes' CPU (``/proc/PID/stat``) and replica-call
counters (``/metrics``) read before and after it. Writes results.json, scale.md and scale.png to
``--out`` (:mod:`loadtest.scale_figures`, :mod:`loadtest.scale_report`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kvnode
from kvnode.config import NodeConfig
from kvnode.ops.argtypes import comma_list, positive_float, positive_int
from kvnode.ops.cluster_config import machine_placement
from kvnode.ops.local_cluster import LocalCluster, start_local_cluster
from kvnode.ops.parsing import OneLineParser
from kvnode.ops.processes import NodeProcess, cpu_seconds
from loadtest import interruptible
from loadtest.compare import Progress
from loadtest.fill import describe_failures, fill
from loadtest.openloop import REQUEST_TIMEOUT
from loadtest.replica_calls import REPLICA_CALLS, REQUEST_OPS, calls_made, replica_calls
from loadtest.scale_figures import Run, Shape
from loadtest.scale_report import write_report
from loadtest.workers import GeneratorPool
from loadtest.workload import OPS, Op, Workload

__all__ = ["ScaleSettings", "main", "run_scale"]

# A guess at a cluster's start, fill and stop (this, plus so much per member), for progress lines only.
_START_OVERHEAD_S = 4.0
_PER_MEMBER_S = 1.0


@dataclass(frozen=True)
class ScaleSettings:
    shapes: list[Shape]
    replication_factor: int
    op: Op
    rate: float  # requests per second, every shape alike
    duration: float  # seconds per run
    repeats: int  # rounds: runs per shape, each on a fresh cluster
    warmup: float  # seconds of an unrecorded run first
    idle: float  # seconds the idle cluster's CPU is read over
    keys: int
    value_size: int
    workers: int  # generator processes
    connections: int  # keep-alive connections, over every worker
    out: Path
    command: str = ""  # as typed, for the report

    @property
    def planned_seconds(self) -> float:
        per_run = self.idle + self.warmup + self.duration + _START_OVERHEAD_S
        return self.repeats * sum(per_run + _PER_MEMBER_S * shape.members for shape in self.shapes)


def run_scale(settings: ScaleSettings) -> Path:
    """Measure every shape in every round, then write results.json and the report; the report's path."""
    progress = Progress(settings.planned_seconds, "scale")
    runs: list[Run] = []
    idle: list[Run] = []
    with GeneratorPool(settings.workers) as pool, tempfile.TemporaryDirectory(prefix="kvnode-scale-") as data:
        for repeat in range(settings.repeats):
            for shape in settings.shapes:
                progress.say(f"{shape.label}: round {repeat + 1} of {settings.repeats}: a fresh cluster")
                base = NodeConfig(data_dir=Path(data) / f"{shape.members}x{shape.per_host}-{repeat}")
                cluster = start_local_cluster(
                    base,
                    shape.members,
                    NodeProcess,
                    log_dir=base.data_dir / "logs",
                    configure=machine_placement(shape.per_host, settings.replication_factor),
                )
                try:
                    _Shape(shape, cluster, settings, pool, progress).measure(repeat, runs, idle)
                finally:
                    cluster.stop()
    settings.out.mkdir(parents=True, exist_ok=True)
    results = {"settings": _settings_json(settings), "header": _header(settings), "runs": runs, "idle": idle}
    (settings.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    report = write_report(settings.out, results)
    progress.say(f"done: {report}")
    return report


class _Shape:
    """One shape's cluster under measurement, for one round."""

    def __init__(
        self,
        shape: Shape,
        cluster: LocalCluster[NodeProcess],
        settings: ScaleSettings,
        pool: GeneratorPool,
        progress: Progress,
    ) -> None:
        self.shape, self.cluster, self.settings = shape, cluster, settings
        self.pool, self.progress = pool, progress
        self.members = list(cluster[0].config.cluster)  # as placement hashes them: token-aware routing
        self.workload = Workload(settings.op, settings.keys, settings.value_size)

    def measure(self, repeat: int, runs: list[Run], idle: list[Run]) -> None:
        settings, say = self.settings, self.progress.say
        say(f"{self.shape.label}: filling {settings.keys} keys of {settings.value_size} bytes")
        _, failures = interruptible.run(
            fill(self.members, Workload("put", settings.keys, settings.value_size))
        )
        if failures:
            raise RuntimeError(f"{self.shape.label}: the fill failed: {describe_failures(failures)}")
        self.progress.advance(_START_OVERHEAD_S + _PER_MEMBER_S * self.shape.members)
        idle.append({**self._idle(), "repeat": repeat})
        self.progress.advance(settings.idle)
        say(f"{self.shape.label}: idle, {idle[-1]['idle_cpu_s'] / idle[-1]['idle_s']:.3f} s of CPU a second")
        pool, members, workload = self.pool, self.members, self.workload
        pool.run(members, workload, settings.rate, settings.warmup, settings.connections, token_aware=True)
        self.progress.advance(settings.warmup)
        run = self._run(repeat)
        runs.append(run)
        calls = run["replica_calls"]
        say(
            f"{self.shape.label}: run {repeat + 1} of {settings.repeats}: {run['achieved_rate']:,.0f}/s, "
            f"p99 {run['latency_ms']['p99']:.2f} ms, {calls['per_request'] if calls else 'n/a'} replica "
            f"calls and {run['server_cpu_us_per_request'] or 0:,.0f} µs of server CPU per request"
        )

    def _idle(self) -> Run:
        """The idle cluster's own CPU and replica calls (every op) over ``settings.idle`` seconds."""
        calls, cpu, began = replica_calls(self.members), self._server_cpu(), time.monotonic()
        time.sleep(self.settings.idle)  # the subject: what the idle cluster itself costs over this span
        cpu, span = self._server_cpu() - cpu, time.monotonic() - began
        after = replica_calls(self.members)
        made = None if calls is None or after is None else sum((after - calls).values())
        return {**self._where(), "idle_s": span, "idle_cpu_s": cpu, "idle_calls": made}

    def _run(self, repeat: int) -> Run:
        settings = self.settings
        before = replica_calls(self.members, REQUEST_OPS)
        cpu, began = self._server_cpu(), time.monotonic()
        result = self.pool.run(
            self.members,
            self.workload,
            settings.rate,
            settings.duration,
            settings.connections,
            token_aware=True,
        )
        cpu, span = self._server_cpu() - cpu, time.monotonic() - began
        after = replica_calls(self.members, REQUEST_OPS)
        self.progress.advance(settings.duration)
        return {
            **self._where(),
            "hosts": self.shape.hosts,
            "repeat": repeat,
            **result.to_json(),
            "replica_calls": calls_made(before, after, result.requests),
            "server_cpu_s": cpu,
            "cpu_span_s": span,  # the seconds over which server_cpu_s was read
            "server_cpu_us_per_request": cpu * 1e6 / result.requests if result.requests else None,
        }

    def _where(self) -> Run:
        return {"members": self.shape.members, "per_host": self.shape.per_host}

    def _server_cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.cluster.pids)


def _settings_json(settings: ScaleSettings) -> dict[str, Any]:
    return {**asdict(settings), "out": str(settings.out)}


def _header(settings: ScaleSettings) -> list[str]:
    cores = os.cpu_count()
    shapes = "; ".join(shape.label for shape in settings.shapes)
    details = {
        "command": f"`{settings.command}`",
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kvnode": kvnode.__version__,
        "shapes": f"{shapes}; hosts modelled on loopback (127.0.0.1, 127.0.0.2, ...), filled in order; "
        f"{settings.repeats} rounds, each shape in turn on a fresh cluster in each, so that the machine's "
        "slow spells fall on every shape alike",
        "cluster": f"replication factor {settings.replication_factor} in every shape, so every request asks "
        f"from = {settings.replication_factor} replicas (the default) and acks at the default quorum; async "
        "fan-out (the default)",
        "load": f"open loop, {settings.op.upper()} at a constant {settings.rate:g}/s, one run of "
        f"{settings.duration:g} s a shape a round after an uncounted {settings.warmup:g} s warm-up; "
        f"{settings.keys} keys of {settings.value_size} bytes, filled first on each cluster; token-aware: "
        f"each request to its key's first owner, so one of its replica calls is local; request timeout "
        f"{REQUEST_TIMEOUT:g} s",
        "generator": f"{settings.workers} worker process(es), {settings.connections} keep-alive connections "
        "(loadtest.openloop: a run is INVALID when the generator, not the server, set the pace, or when over "
        "1 % of its requests failed)",
        "server CPU": "user + system CPU of every node process (`/proc/PID/stat`, in clock ticks), read "
        "before and after each run, summed, per request that finished; idle: the same over "
        f"{settings.idle:g} s of the filled cluster with no load, before the warm-up; less idle: a run's "
        "CPU less its own cluster's idle CPU a second times the run's span, per request",
        "replica calls": f"`{REPLICA_CALLS}` of ops {' and '.join(sorted(REQUEST_OPS))} (read repair "
        "included; not the clock calls, hints and repairs every member makes whatever the load), summed "
        "over the nodes, each node's own storage counted as a replica, read before and after each run, per "
        "request",
        "machine": f"{cores} cores (os.cpu_count()) shared by every member, the generator and this script: "
        "more members on one machine add processes, not cores, so what this can show is the work each "
        "request costs (CPU, replica calls), not how capacity grows with machines",
    }
    return [f"- **{name}**: {value}" for name, value in details.items()]


def _parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m loadtest scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=comma_list(positive_int), help="member counts (default: 3,6,12)")
    parser.add_argument("--machines", type=positive_int, help="machines (hosts), each of every --per-host")
    parser.add_argument(
        "--per-host",
        type=comma_list(positive_int),
        help="members per host: one number with --members (default: one a core), a list with --machines "
        "(default: 1,4)",
    )
    parser.add_argument(
        "--replication-factor", type=positive_int, default=3, help="every shape's (default: 3)"
    )
    parser.add_argument("--op", choices=OPS, default="mixed", help="the workload (default: mixed)")
    parser.add_argument("--rate", type=positive_float, default=300.0, help="requests/s (default: 300)")
    parser.add_argument("--duration", type=positive_float, default=15.0, help="seconds a run (default: 15)")
    parser.add_argument("--repeats", type=positive_int, default=3, help="rounds: runs a shape (default: 3)")
    parser.add_argument(
        "--warmup", type=positive_float, default=3.0, help="seconds, not counted (default: 3)"
    )
    parser.add_argument("--idle", type=positive_float, default=5.0, help="seconds of idle CPU (default: 5)")
    parser.add_argument(
        "--keys", type=positive_int, default=1000, help="keys filled and drawn (default: 1000)"
    )
    parser.add_argument("--value-size", type=positive_int, default=100, help="bytes a value (default: 100)")
    parser.add_argument("--workers", type=positive_int, default=1, help="generator processes (default: 1)")
    parser.add_argument("--connections", type=positive_int, default=64, help="in all (default: 64)")
    parser.add_argument("--out", type=Path, default=Path("out/scale"), help="report directory")
    return parser


def shapes_from(
    members: Sequence[int] | None, machines: int | None, per_host: Sequence[int] | None
) -> list[Shape]:
    """The shapes the flags ask for; ValueError with a one-line reason."""
    if machines is not None:
        if members is not None:
            raise ValueError("--members and --machines exclude each other: members are machines x --per-host")
        return [Shape(machines * count, count) for count in dict.fromkeys(per_host or (1, 4))]
    if per_host is not None and len(per_host) > 1:
        raise ValueError("with --members, --per-host is one number (a list goes with --machines)")
    per = per_host[0] if per_host else os.cpu_count() or 1
    return [Shape(count, per) for count in dict.fromkeys(members or (3, 6, 12))]


def main(argv: list[str], command: str) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        shapes = shapes_from(args.members, args.machines, args.per_host)
    except ValueError as error:
        parser.error(str(error))
    small = [shape.members for shape in shapes if shape.members < args.replication_factor]
    if small:
        needed = f"--replication-factor {args.replication_factor}"
        parser.error(f"every shape needs at least {needed} members, got {small[0]}")
    settings = ScaleSettings(
        shapes=shapes,
        replication_factor=args.replication_factor,
        op=args.op,
        rate=args.rate,
        duration=args.duration,
        repeats=args.repeats,
        warmup=args.warmup,
        idle=args.idle,
        keys=args.keys,
        value_size=args.value_size,
        workers=args.workers,
        connections=args.connections,
        out=args.out,
        command=command,
    )
    print(f"report: {run_scale(settings)}")
    return 0
