"""``python -m loadtest compare``: sync vs async fan-out, scenario by scenario, on fresh 3-node clusters.

For every scenario and mode: start a fresh cluster (:mod:`loadtest.scenarios`), fill the key space,
break the replica the scenario is about, then PUT and GET at each asked rate for a fixed time
(:func:`loadtest.openloop.run_rate`), then search for the highest rate that meets the SLO. Results,
histograms and the report (:mod:`loadtest.report`) go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

import kvnode
from kvnode.config import FanoutMode
from loadtest import interruptible
from loadtest.fill import fill
from loadtest.openloop import REQUEST_TIMEOUT, RateResult, run_rate
from loadtest.report import Run, write_report
from loadtest.scenarios import SCENARIOS, SLOW_REPLICA_DELAY_MS, ScenarioCluster, start_scenario
from loadtest.workload import Op, Workload

__all__ = ["CompareSettings", "run_compare", "sustains"]

MODES: tuple[FanoutMode, ...] = ("async", "sync")
OPS: tuple[Op, ...] = ("put", "get")
_CLUSTER_OVERHEAD_S = 5.0  # a guess at start + fill + stop, for the time-left estimate only


@dataclass(frozen=True)
class CompareSettings:
    rates: list[float]
    duration: float
    slo_ms: float
    scenarios: list[str]
    modes: list[FanoutMode]
    out: Path
    keys: int
    value_size: int
    search_duration: float  # seconds per step of the max-rate search
    search_steps: int  # steps per scenario/mode/op beyond the fixed rates

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CompareSettings:
        quick = bool(args.quick)
        modes = args.modes or list(MODES)  # argparse has checked the names (kvnode.argtypes.choices)
        scenarios = args.scenarios or list(SCENARIOS)
        return cls(
            rates=args.rates or ([100.0, 300.0] if quick else [250.0, 500.0, 1000.0, 1500.0]),
            duration=args.duration or (1.5 if quick else 10.0),
            slo_ms=args.slo_ms,
            scenarios=scenarios,
            modes=cast(list[FanoutMode], modes),
            out=args.out,
            keys=500 if quick else 10_000,
            value_size=100,
            search_duration=1.5 if quick else 5.0,
            search_steps=2 if quick else 6,
        )

    @property
    def planned_seconds(self) -> float:
        per_cluster = len(OPS) * (len(self.rates) * self.duration + self.search_steps * self.search_duration)
        return len(self.scenarios) * len(self.modes) * (per_cluster + _CLUSTER_OVERHEAD_S)


def sustains(result: RateResult, slo_ms: float) -> bool:
    """Met the SLO: p99 within it, at least 95% of the asked rate achieved, at most 1% errors."""
    errors = sum(result.errors.values())
    return (
        result.latency.percentile_ms(99) <= slo_ms
        and result.achieved_rate >= 0.95 * result.asked_rate
        and errors <= 0.01 * max(1, result.requests)
    )


def search_max_rate(
    measure: Callable[[float], RateResult], tried: Sequence[RateResult], slo_ms: float, steps: int
) -> float | None:
    """The highest rate found to meet the SLO, refining from the rates already ``tried``.

    Doubles above the best passing rate until one fails, then bisects between the two; stops after
    ``steps`` measurements or once the bracket is within 10%.
    """
    passed = [r.asked_rate for r in tried if sustains(r, slo_ms)]
    failed = [r.asked_rate for r in tried if not sustains(r, slo_ms)]
    low = max(passed, default=0.0)
    high = min((rate for rate in failed if rate > low), default=None)
    for _ in range(steps):
        if high is not None and low and high / low <= 1.1:
            break
        if high is None:
            rate = low * 2
        elif low:
            rate = (low + high) / 2
        else:
            rate = high / 2
        rate = float(round(rate))
        if rate < 1:
            break
        if sustains(measure(rate), slo_ms):
            low = rate
        else:
            high = rate
    return low or None


class _Progress:
    """Progress lines on stderr: where the run is and an estimate of the time left."""

    def __init__(self, planned: float) -> None:
        self.started = time.monotonic()
        self.planned = planned
        self.done = 0.0

    def advance(self, planned_seconds: float) -> None:
        self.done += planned_seconds

    def say(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        # Scale what is left of the plan by how the plan has held up so far.
        pace = elapsed / self.done if self.done else 1.0
        left = max(0.0, (self.planned - self.done) * pace)
        print(f"[compare {elapsed:5.0f}s, ~{left:.0f}s left] {message}", file=sys.stderr, flush=True)


def run_compare(settings: CompareSettings) -> int:
    """Run every scenario and mode, then write the report; the exit status (130 on Ctrl-C)."""
    out = settings.out
    (out / "histograms").mkdir(parents=True, exist_ok=True)
    progress = _Progress(settings.planned_seconds)
    runs: list[Run] = []
    sustained: list[Run] = []
    try:
        with tempfile.TemporaryDirectory(prefix="kvnode-compare-") as data:
            for scenario in settings.scenarios:
                for mode in settings.modes:
                    progress.say(f"{scenario}/{mode}: starting a fresh 3-node cluster")
                    cluster = start_scenario(scenario, mode, Path(data) / f"{scenario}-{mode}")
                    try:
                        _measure_cluster(cluster, settings, progress, runs, sustained)
                    finally:
                        cluster.stop()
    except KeyboardInterrupt:
        print("compare: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    except RuntimeError as error:  # a cluster that did not start or fill
        print(f"compare: {error}", file=sys.stderr)
        return 1
    (out / "results.json").write_text(json.dumps({"runs": runs, "sustained": sustained}, indent=1) + "\n")
    report = write_report(out, runs, _header(settings), sustained, settings.slo_ms)
    progress.say(f"done: {report}")
    return 0


def _measure_cluster(
    cluster: ScenarioCluster,
    settings: CompareSettings,
    progress: _Progress,
    runs: list[Run],
    sustained: list[Run],
) -> None:
    scenario, mode = cluster.scenario, cluster.mode
    progress.say(f"{scenario}/{mode}: filling {settings.keys} keys")
    filler = Workload("put", settings.keys, settings.value_size)
    _, failures = interruptible.run(fill(cluster.load_urls, filler))
    if failures:
        raise RuntimeError(
            f"{scenario}/{mode}: the fill failed for {sum(failures.values())} keys: {failures}"
        )
    cluster.after_fill()
    progress.advance(_CLUSTER_OVERHEAD_S)
    for op in OPS:
        workload = Workload(op, settings.keys, settings.value_size)
        tried = [
            _measure(cluster, workload, rate, "rate", settings.duration, settings.out, progress, runs)
            for rate in settings.rates
        ]
        best = search_max_rate(
            partial(
                _measure, cluster, workload, kind="search", duration=settings.search_duration,
                out=settings.out, progress=progress, runs=runs,
            ),
            tried,
            settings.slo_ms,
            settings.search_steps,
        )  # fmt: skip
        sustained.append({"scenario": scenario, "op": op, "mode": mode, "rate": best})


def _measure(
    cluster: ScenarioCluster,
    workload: Workload,
    rate: float,
    kind: str,
    duration: float,
    out: Path,
    progress: _Progress,
    runs: list[Run],
) -> RateResult:
    """One constant-rate run, its histogram written and its figures appended to ``runs``."""
    name = f"{cluster.scenario}/{cluster.mode}: {workload.op.upper()}"
    progress.say(f"{name} at {rate:g} req/s for {duration:g}s ({kind})")
    result = interruptible.run(run_rate(cluster.load_urls, workload, rate, duration))
    progress.advance(duration)
    hdr = Path("histograms") / f"{cluster.scenario}_{cluster.mode}_{workload.op}_{rate:g}.hdr"
    result.write_hdr(out / hdr)
    runs.append({"scenario": cluster.scenario, "mode": cluster.mode, "kind": kind, "hdr": str(hdr)})
    runs[-1].update(result.to_json())
    return result


def _header(settings: CompareSettings) -> list[str]:
    command = shlex.join(["python", "-m", "loadtest", *sys.argv[1:]])
    details: dict[str, Any] = {
        "command": f"`{command}`",
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kvnode": kvnode.__version__,
        "cluster": "3 nodes on 127.0.0.1, fresh per scenario and mode, default ack=2 of from=3",
        "load": f"open loop, constant rate, round-robin over the loaded nodes, {settings.keys} keys of "
        f"{settings.value_size} bytes (filled first), {settings.duration:g}s per rate, "
        f"search steps of {settings.search_duration:g}s, request timeout {REQUEST_TIMEOUT:g}s",
        "slow-replica": f"node C answers its peers {SLOW_REPLICA_DELAY_MS} ms late (delaying proxy)",
        "histograms": "`histograms/*.hdr` (HdrHistogram base64, microseconds); all figures in `results.json`",
    }
    return [f"- **{name}**: {value}" for name, value in details.items()]
