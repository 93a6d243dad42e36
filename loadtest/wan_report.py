"""``python -m loadtest wan``'s report: wan.md's words and tables and wan-p99.png, drawn from what was
measured alone (:class:`loadtest.wan_figures.Wan`); a conclusion only from runs long enough to compare."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kvnode
from loadtest.report import MIN_RUN_REQUESTS, MIN_RUN_S
from loadtest.wan_figures import OPS, ROUND_TRIP_PROBES, SHAPES, Wan

__all__ = ["plot", "report_lines"]


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
