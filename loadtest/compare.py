"""``python -m loadtest compare``: the fan-out modes side by side, scenario by scenario, on fresh clusters.

For every scenario and every mode of kvnode's registry (:data:`kvnode.coordinator.fanout.FANOUTS`, so a new
mode shows up here by itself): start a fresh 3-node cluster (:mod:`loadtest.scenarios`), fill the key space,
break the replica the scenario is about, then for PUT and GET:

- measure each common rate once (the latency comparison at equal load);
- search for the mode's capacity, the highest rate that meets the objective: each rate is measured
  ``repeats`` times and the median decides (:func:`judge`); rates double until one fails, then bisect
  until the bracket is within 10 % or the step budget is used (:func:`search_capacity`). There is no
  other cap, and the report says where each search stopped and why.

Every run also records the replica calls the coordinators made per client request, read from the nodes'
``kvnode_replica_calls_total`` counters before and after it (:func:`replica_calls`), and the generator's
own figures (CPU per request, lateness, VALID/INVALID). The load comes from a pool of generator
processes (:mod:`loadtest.workers`) kept for the whole comparison. Results, histograms and the report
(:mod:`loadtest.report`) go to ``--out``; ``python -m loadtest report --out DIR`` draws the report again
from them (:func:`rewrite_report`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

import kvnode
from kvnode.config import FanoutMode, node_url
from kvnode.coordinator.fanout import FANOUTS
from kvnode.ops.processes import NodeProcess, cpu_seconds
from loadtest import interruptible
from loadtest.capacity import PRECISION, Verdict, judge, search_capacity
from loadtest.fill import fill
from loadtest.openloop import REQUEST_TIMEOUT
from loadtest.rate_result import ERROR_SHARE_LIMIT, RateResult
from loadtest.replica_calls import REPLICA_CALLS, calls_made, replica_calls
from loadtest.report import Run, write_report
from loadtest.scenarios import SCENARIOS, SLOW_REPLICA_DELAY_MS, ScenarioCluster, start_scenario
from loadtest.workers import GeneratorPool
from loadtest.workload import Op, Workload

__all__ = [
    "MODES",
    "CompareSettings",
    "Progress",
    "rewrite_report",
    "run_compare",
]

MODES: tuple[str, ...] = tuple(FANOUTS)
OPS: tuple[Op, ...] = ("put", "get")
_CLUSTER_OVERHEAD_S = 6.0  # a guess at start + fill + stop, for the time-left estimate only


@dataclass(frozen=True)
class CompareSettings:
    rates: list[float]  # the common rates, measured once in every mode
    duration: float  # seconds per common rate
    slo_ms: float
    scenarios: list[str]
    modes: list[str]
    out: Path
    keys: int
    value_size: int
    search_duration: float  # seconds per search step
    repeats: int  # search steps per rate; their median decides
    search_budget: int  # rates the search may try per scenario, mode and op
    workers: int  # generator processes
    connections: int  # keep-alive connections, over all workers

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CompareSettings:
        quick = bool(args.quick)
        return cls(
            rates=args.rates or ([500.0, 1500.0] if quick else [500.0, 1000.0, 2000.0, 4000.0]),
            duration=args.duration or (1.0 if quick else 10.0),
            slo_ms=args.slo_ms,
            scenarios=args.scenarios or list(SCENARIOS),  # names checked by argparse
            modes=args.modes or list(MODES),
            out=args.out,
            keys=500 if quick else 10_000,
            value_size=100,
            search_duration=args.search_duration or (0.6 if quick else 4.0),
            repeats=args.repeats,
            search_budget=args.search_budget or (4 if quick else 7),
            workers=args.workers,
            connections=args.connections,
        )

    @property
    def planned_seconds(self) -> float:
        """The longest the run can take (every search using its whole budget), for progress lines."""
        search = self.search_budget * self.repeats * self.search_duration
        per_cluster = len(OPS) * (len(self.rates) * self.duration + search)
        return len(self.scenarios) * len(self.modes) * (per_cluster + _CLUSTER_OVERHEAD_S)


# --- the pipeline ---------------------------------------------------------------------------------------


class Progress:
    """Progress lines on stderr: where the run is, and how much of its plan is left.

    What is left is counted in the plan's own seconds (each run's load, plus a guess per cluster for
    starting, filling and stopping it) and only ever shrinks: work done and planned work dropped (a
    search that stopped before its budget) both take from it. It bounds the load still to send, not the
    clock: starting workers and reading counters add to every run. An earlier estimate scaled the plan
    by the pace so far, and went up and down as the pace changed."""

    def __init__(self, planned: float, name: str = "compare") -> None:
        self.name = name  # the command, at the head of each line
        self.started = time.monotonic()
        self.planned = planned
        self.done = 0.0

    def advance(self, planned_seconds: float) -> None:
        self.done += planned_seconds

    def skip(self, planned_seconds: float) -> None:
        """Drop planned work that will not be done (a search that stopped before its budget)."""
        self.planned -= planned_seconds

    @property
    def left(self) -> float:
        """The plan's seconds not yet done or dropped."""
        return max(0.0, self.planned - self.done)

    def say(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(
            f"[{self.name} {elapsed:5.0f}s, ≤{self.left:.0f}s planned left] {message}",
            file=sys.stderr,
            flush=True,
        )


def run_compare(settings: CompareSettings) -> int:
    """Run every scenario and mode, then write the report; the exit status (130 on Ctrl-C)."""
    out = settings.out
    (out / "histograms").mkdir(parents=True, exist_ok=True)
    progress = Progress(settings.planned_seconds)
    runs: list[Run] = []
    searches: list[Run] = []
    try:
        with (
            GeneratorPool(settings.workers) as pool,
            tempfile.TemporaryDirectory(prefix="kvnode-compare-") as data,
        ):
            for scenario in settings.scenarios:
                for mode in settings.modes:
                    progress.say(f"{scenario}/{mode}: starting a fresh 3-node cluster")
                    cluster = start_scenario(
                        scenario, cast(FanoutMode, mode), Path(data) / f"{scenario}-{mode}"
                    )
                    try:
                        _Cluster(cluster, settings, pool, progress, runs).measure(searches)
                    finally:
                        cluster.stop()
    except KeyboardInterrupt:
        print("compare: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    except RuntimeError as error:  # a cluster that did not start or fill, a generator worker that died
        print(f"compare: {error}", file=sys.stderr)
        return 1
    header = _header(settings)
    results = {"settings": _settings_json(settings), "header": header, "runs": runs, "searches": searches}
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    report = write_report(out, runs, header, searches, settings.slo_ms)
    progress.say(f"done: {report}")
    return 0


def rewrite_report(out: Path) -> Path:
    """Write ``out``'s report.md and plots again from its results.json and histograms (the report's
    rules or plots changed, the runs did not); the report's path. The "How it was measured" lines come
    from results.json, or for a run written before they were kept there, from the previous report."""
    results = json.loads((out / "results.json").read_text())
    header = results.get("header")
    if header is None:
        previous = (out / "report.md").read_text() if (out / "report.md").exists() else ""
        section = previous.partition("\n## How it was measured\n\n")[2].partition("\n\n")[0]
        header = section.splitlines() or [f"- **rewritten** by `python -m loadtest report --out {out}`"]
    return write_report(out, results["runs"], header, results["searches"], results["settings"]["slo_ms"])


class _Cluster:
    """One scenario/mode cluster under measurement: its runs go to ``runs``."""

    def __init__(
        self,
        cluster: ScenarioCluster,
        settings: CompareSettings,
        pool: GeneratorPool,
        progress: Progress,
        runs: list[Run],
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.pool = pool
        self.progress = progress
        self.runs = runs
        # Counters are read from every node directly (not through the slow replica's proxy).
        self.node_urls = [
            node_url(node.config.host, node.config.port)
            for node in cluster.servers
            if isinstance(node, NodeProcess)
        ]
        self.node_pids = [node.pid for node in cluster.servers if isinstance(node, NodeProcess)]
        self.name = f"{cluster.scenario}/{cluster.mode}"

    def measure(self, searches: list[Run]) -> None:
        settings = self.settings
        self.progress.say(f"{self.name}: filling {settings.keys} keys")
        _, failures = interruptible.run(
            fill(self.cluster.load_urls, Workload("put", settings.keys, settings.value_size))
        )
        if failures:
            raise RuntimeError(f"{self.name}: the fill failed for {sum(failures.values())} keys: {failures}")
        self.cluster.after_fill()
        self.progress.advance(_CLUSTER_OVERHEAD_S)
        for op in OPS:
            workload = Workload(op, settings.keys, settings.value_size)
            fixed = [self.run(workload, rate, settings.duration, "rate") for rate in settings.rates]
            passed = [
                result.asked_rate
                for result in fixed
                if judge(result.asked_rate, [result], settings.slo_ms).passed
            ]
            # Start where the single runs left off: the highest common rate that passed, re-judged.
            start = max(passed) if passed else min(settings.rates) / 2
            search = search_capacity(partial(self.judge, workload), start, settings.search_budget)
            unused = settings.search_budget - len(search.verdicts)
            self.progress.skip(unused * settings.repeats * settings.search_duration)
            self.progress.say(
                f"{self.name}: {op.upper()} sustains {search.sustained or 0:g}/s ({search.stopped})"
            )
            searches.append(
                {
                    "scenario": self.cluster.scenario,
                    "mode": self.cluster.mode,
                    "op": op,
                    "sustained": search.sustained,
                    "lowest_failed": search.lowest_failed,
                    "stopped": search.stopped,
                    "verdicts": [asdict(verdict) for verdict in search.verdicts],
                }
            )

    def judge(self, workload: Workload, rate: float) -> Verdict:
        settings = self.settings
        steps = [
            self.run(workload, rate, settings.search_duration, "search", step)
            for step in range(settings.repeats)
        ]
        verdict = judge(rate, steps, settings.slo_ms)
        self.progress.say(
            f"{self.name}: {workload.op.upper()} {rate:g}/s "
            + ("passed" if verdict.passed else f"failed: {verdict.reason}")
        )
        return verdict

    def run(self, workload: Workload, rate: float, duration: float, kind: str, step: int = 0) -> RateResult:
        """One constant-rate run: its histogram written, its figures and replica calls appended to runs."""
        cluster, settings = self.cluster, self.settings
        self.progress.say(f"{self.name}: {workload.op.upper()} at {rate:g} req/s for {duration:g}s ({kind})")
        before = replica_calls(self.node_urls)
        cpu_before = sum(cpu_seconds(pid) for pid in self.node_pids)
        result = self.pool.run(cluster.load_urls, workload, rate, duration, settings.connections)
        cpu = sum(cpu_seconds(pid) for pid in self.node_pids) - cpu_before
        after = replica_calls(self.node_urls)
        self.progress.advance(duration)
        suffix = f"_{step}" if kind == "search" else ""
        hdr = (
            Path("histograms")
            / f"{cluster.scenario}_{cluster.mode}_{workload.op}_{kind}_{rate:g}{suffix}.hdr"
        )
        result.write_hdr(settings.out / hdr)
        run: Run = {
            "scenario": cluster.scenario,
            "mode": cluster.mode,
            "kind": kind,
            "step": step,
            "hdr": str(hdr),
        }
        run.update(result.to_json())
        run["replica_calls"] = calls_made(before, after, result.requests)
        run["server_cpu_us_per_request"] = cpu * 1e6 / result.requests if result.requests else None
        self.runs.append(run)
        return result


def _settings_json(settings: CompareSettings) -> dict[str, Any]:
    return {**asdict(settings), "out": str(settings.out)}


def _header(settings: CompareSettings) -> list[str]:
    command = shlex.join(["python", "-m", "loadtest", *sys.argv[1:]])
    rates = ", ".join(f"{rate:g}" for rate in settings.rates)
    details: dict[str, Any] = {
        "command": f"`{command}`",
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kvnode": kvnode.__version__,
        "modes": ", ".join(settings.modes) + " (kvnode.coordinator.fanout.FANOUTS)",
        "cluster": "3 nodes on 127.0.0.1, fresh per scenario and mode, default ack=2 of from=3",
        "load": f"open loop, constant rate, round-robin over the loaded nodes, {settings.keys} keys of "
        f"{settings.value_size} bytes (filled first); common rates {rates}/s for {settings.duration:g}s "
        f"each; request timeout {REQUEST_TIMEOUT:g}s",
        "capacity search": f"each rate {settings.repeats} steps of {settings.search_duration:g}s, the median "
        f"decides; doubling, then bisecting to {PRECISION:.0%}; at most {settings.search_budget} rates",
        "generator": f"{settings.workers} worker processes, {settings.connections} keep-alive connections "
        "(loadtest.openloop: a run is INVALID when the generator, not the server, set the pace, or when "
        f"over {ERROR_SHARE_LIMIT:.0%} of its requests failed; achieved rates count successful requests)",
        "slow-replica": f"node C answers its peers {SLOW_REPLICA_DELAY_MS} ms late (delaying proxy)",
        "replica calls": f"`{REPLICA_CALLS}` summed over the nodes, read before and after every run",
        "machine": f"{os.cpu_count()} cores (os.cpu_count()) shared by the 3 node processes (and a delaying "
        f"proxy in slow-replica), the {settings.workers} generator processes and everything else; server "
        "CPU per request is the CPU time (`/proc/PID/stat`) of every node process, summed, per request",
        "histograms": "`histograms/*.hdr` (HdrHistogram base64, microseconds); all figures in `results.json`",
    }
    return [f"- **{name}**: {value}" for name, value in details.items()]
