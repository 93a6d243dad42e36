"""The compare report: ``report.md``, opening with a conclusion drawn from the data, and its plots.

Input is what :mod:`loadtest.compare` writes to ``results.json``: the runs (one dict per run: scenario,
mode, kind "rate" or "search", step, the file of its histogram, :meth:`RateResult.to_json` and the
replica calls it made) and the capacity searches (scenario, mode, op, the rate sustained, why the search
stopped, the verdict at every rate it tried), so a report can be redrawn from a finished run's directory.

A conclusion claims only what its runs can show. No comparison rests on a run shorter than
:data:`MIN_RUN_S` (a fraction of a second is mostly start-up and the tail of answers after the
schedule's end: a 0.6 s step reached 80 % of its rate) or, for a latency percentile, on a run of fewer
than :data:`MIN_RUN_REQUESTS` requests; every conclusion says which runs it rests on. A report whose runs
are shorter than that (``--quick``) is headed "Smoke check": the pipeline ran end to end, nothing more.

The plots are drawn by :mod:`loadtest.plots`.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from loadtest.plots import (
    OPS,
    Run,
    capacity_runs,
    plot_capacity,
    plot_rates,
    plot_spectra,
    rate_label,
    sustained_label,
)
from loadtest.rate_result import ERROR_SHARE_LIMIT

__all__ = ["MIN_RUN_REQUESTS", "MIN_RUN_S", "Run", "conclusion", "headline", "write_report"]

MIN_RUN_S = 2.0  # seconds: no comparison from a shorter run (a capacity-search step included)
MIN_RUN_REQUESTS = 1_000  # no percentile comparison from fewer requests: a p99 resting on < 10 of them


def write_report(
    out: Path, runs: Sequence[Run], header: Iterable[str], searches: Sequence[Run], slo_ms: float
) -> Path:
    """Write report.md and the plots into ``out``; the report's path."""
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    modes = list(dict.fromkeys(run["mode"] for run in runs))
    scenarios = list(dict.fromkeys(run["scenario"] for run in runs))
    lines = [*headline(runs, modes), ""]
    lines += ["## Conclusion", "", *conclusion(runs, searches, slo_ms), ""]
    lines += ["## How it was measured", "", *header, ""]
    lines += _capacity_section(out, searches, runs, modes, slo_ms)
    for scenario in scenarios:
        lines += [f"## {scenario}", ""]
        plot = plots / f"rate-{scenario}.png"
        plot_rates(
            plot, [run for run in runs if run["scenario"] == scenario], searches, modes, scenario, slo_ms
        )
        lines += [f"![{scenario}: p99 and achieved rate by asked rate]({plot.relative_to(out)})", ""]
        for op in OPS:
            mine = [run for run in runs if run["scenario"] == scenario and run["op"] == op]
            if not mine:
                continue
            lines += [f"### {op.upper()}", "", *_run_table(mine), ""]
            plot = plots / f"latency-{scenario}-{op}.png"
            capacity = capacity_runs(mine, searches)
            plot_spectra(plot, out, mine, capacity, modes, f"{scenario}: {op.upper()}", slo_ms)
            lines += [f"![{scenario} {op} latency by percentile]({plot.relative_to(out)})", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


# --- words -------------------------------------------------------------------------------------------


def _too_short(runs: Iterable[Run]) -> list[Run]:
    return [run for run in runs if run["duration_s"] < MIN_RUN_S]


def headline(runs: Sequence[Run], modes: Sequence[str]) -> list[str]:
    """The title, and for runs too short to compare anything, the words "Smoke check" and why."""
    names = ", ".join(modes)
    short = _too_short(runs)
    if not short:
        return [f"# kvnode: replica fan-out modes compared ({names})"]
    durations = _seconds(sorted({run["duration_s"] for run in short}))
    return [
        f"# Smoke check: kvnode's replica fan-out modes ({names}) ran end to end; too short to compare",
        "",
        f"{len(short)} of {len(runs)} runs lasted {durations} s, under the {MIN_RUN_S:g} s a comparison "
        "needs (`--quick` settings): the conclusion compares nothing those runs would decide, and the "
        "tables and plots show what ran, not how the modes compare.",
    ]


def conclusion(runs: Sequence[Run], searches: Sequence[Run], slo_ms: float) -> list[str]:
    """Bullets drawn from the data: per scenario and op, which mode sustains the most and by how much,
    the latency of each mode at the highest common rate they all sustained, and the replica calls
    each made per request, each with the runs it rests on, and none from runs below the minimums
    (MIN_RUN_S, MIN_RUN_REQUESTS); then how many runs the generator invalidated."""
    lines = []
    for scenario, op in dict.fromkeys((row["scenario"], row["op"]) for row in searches):
        rows = [row for row in searches if (row["scenario"], row["op"]) == (scenario, op)]
        mine = [run for run in runs if (run["scenario"], run["op"]) == (scenario, op)]
        sentences = [
            _capacity_sentence(rows, mine, slo_ms),
            _latency_sentence(mine, [row["mode"] for row in rows], slo_ms),
            *_calls_sentence(mine, [row["mode"] for row in rows]),
            *_cpu_sentence(mine, [row["mode"] for row in rows]),
        ]
        lines.append(f"- **{scenario}, {op.upper()}**: " + " ".join(sentences))
    if runs:
        lines.append("- " + _generator_sentence(runs))
    return lines


def _generator_sentence(runs: Sequence[Run]) -> str:
    requests = sum(run["requests"] for run in runs)
    cpu = sum(run["generator"]["cpu_us_per_request"] * run["requests"] for run in runs) / max(1, requests)
    lateness = statistics.median(run["generator"]["lateness_ms"]["p99"] for run in runs)
    figures = f"{cpu:.0f} µs of its CPU per request over all runs, median lateness p99 {lateness:.2f} ms"
    invalid = [run for run in runs if not run["generator"]["valid"]]
    if not invalid:
        return f"The generator kept to its schedule in every one of the {len(runs)} runs ({figures})."
    return (
        f"The generator was INVALID in {len(invalid)} of {len(runs)} runs ({figures}); the tables say why "
        "(usually a saturated cluster that held every connection, or CPU shared with the nodes): their "
        "figures describe the generator as much as the cluster."
    )


def _capacity_sentence(rows: Sequence[Run], runs: Sequence[Run], slo_ms: float) -> str:
    """Which mode sustains the most and by how much, from steps of at least MIN_RUN_S each."""
    steps = [run for run in runs if run["kind"] == "search"]
    if not steps:
        return "No capacity search ran."
    durations = sorted({run["duration_s"] for run in steps})
    repeats = max(Counter((run["mode"], run["asked_rate"]) for run in steps).values())
    basis = f"each rate judged by the median of {repeats} steps of {_seconds(durations)} s"
    if _too_short(steps):
        return (
            f"Capacity not compared: {basis}, under the {MIN_RUN_S:g} s a step needs (the capacity table "
            "lists what each search reached)."
        )
    by_mode = {row["mode"]: row["sustained"] for row in rows}
    shown = {row["mode"]: sustained_label(row) for row in rows}
    ranked = sorted(by_mode, key=lambda mode: by_mode[mode] or 0.0, reverse=True)
    best = ranked[0]
    if not by_mode[best]:
        return f"No mode met the objective (p99 ≤ {slo_ms:g} ms) at any rate tried ({basis})."
    leaders = [mode for mode in ranked if by_mode[mode] == by_mode[best]]
    most = f"{' and '.join(leaders)} sustain" if len(leaders) > 1 else f"{best} sustains"
    others = [
        f"{mode} {shown[mode]} ({_change(by_mode[mode] or 0.0, by_mode[best])})"
        for mode in ranked
        if mode not in leaders
    ]
    return f"{most} the most, {shown[best]}" + (f"; {', '.join(others)}" if others else "") + f" ({basis})."


def _latency_sentence(runs: Sequence[Run], modes: Sequence[str], slo_ms: float) -> str:
    """Each mode's p50 / p99 at the highest common rate all sustained, from runs long and large enough."""
    fixed = [run for run in runs if run["kind"] == "rate"]
    enough = [run for run in fixed if run["duration_s"] >= MIN_RUN_S and run["requests"] >= MIN_RUN_REQUESTS]
    common = _highest_common_rate(enough, modes, slo_ms)
    if common is None:
        if fixed and not enough:
            return (
                f"Latency not compared: every common-rate run lasted under {MIN_RUN_S:g} s or had fewer "
                f"than {MIN_RUN_REQUESTS:,} requests."
            )
        return "No common rate was sustained by every mode."
    at_rate = {run["mode"]: run for run in enough if run["asked_rate"] == common}
    figures = ", ".join(
        f"{mode} {at_rate[mode]['latency_ms']['p50']:.1f} / {at_rate[mode]['latency_ms']['p99']:.1f} ms"
        for mode in modes
    )
    durations = _seconds(sorted({at_rate[mode]["duration_s"] for mode in modes}))
    fewest = min(at_rate[mode]["requests"] for mode in modes)
    return (
        f"At {rate_label(common)}, the highest common rate all sustained, p50 / p99: {figures} (one run of "
        f"{durations} s per mode, at least {fewest:,} requests each)."
    )


def _calls_sentence(runs: Sequence[Run], modes: Sequence[str]) -> list[str]:
    calls = {mode: _median_calls(runs, mode) for mode in modes}
    if all(value is None for value in calls.values()):
        return []
    figures = ", ".join(f"{mode} {_calls(value)}" for mode, value in calls.items())
    counted = min(sum(1 for run in runs if run["mode"] == mode and run["replica_calls"]) for mode in modes)
    return [f"Replica calls per request: {figures} (median over at least {counted} runs per mode)."]


def _cpu_sentence(runs: Sequence[Run], modes: Sequence[str]) -> list[str]:
    """Server CPU per request, summed over every node process: a mode cannot look faster by costing more."""
    values = {
        mode: [
            run["server_cpu_us_per_request"]
            for run in runs
            if run["mode"] == mode and run.get("server_cpu_us_per_request")
        ]
        for mode in modes
    }
    if not all(values.values()):
        return []
    figures = ", ".join(f"{mode} {statistics.median(found):,.0f} µs" for mode, found in values.items())
    counted = min(len(found) for found in values.values())
    return [
        f"Server CPU per request, summed over the cluster's node processes: {figures} (median over at "
        f"least {counted} runs per mode)."
    ]


def _seconds(durations: Sequence[float]) -> str:
    return "-".join(f"{value:g}" for value in (durations[0], durations[-1])[: 1 + (len(durations) > 1)])


def _highest_common_rate(runs: Sequence[Run], modes: Sequence[str], slo_ms: float) -> float | None:
    """The highest common ("rate") rate at which every mode met the objective in its single run."""
    fixed = [run for run in runs if run["kind"] == "rate"]
    good: dict[float, set[str]] = {}
    for run in fixed:
        ok = run["generator"]["valid"] and run["latency_ms"]["p99"] <= slo_ms
        ok = ok and not sum(run["errors"].values()) > ERROR_SHARE_LIMIT * max(1, run["requests"])
        if ok:
            good.setdefault(run["asked_rate"], set()).add(run["mode"])
    rates = [rate for rate, passed in good.items() if passed >= set(modes)]
    return max(rates) if rates else None


def _median_calls(runs: Sequence[Run], mode: str) -> float | None:
    values = [
        run["replica_calls"]["per_request"] for run in runs if run["mode"] == mode and run["replica_calls"]
    ]
    return statistics.median(values) if values else None


def _change(value: float, reference: float | None) -> str:
    if not reference:
        return "n/a"
    return f"{(value - reference) / reference:+.0%}"


def _calls(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


# --- tables --------------------------------------------------------------------------------------------


def _capacity_section(
    out: Path, searches: Sequence[Run], runs: Sequence[Run], modes: Sequence[str], slo_ms: float
) -> list[str]:
    if not searches:
        return []
    plot = out / "plots" / "capacity.png"
    steps = [run for run in runs if run["kind"] == "search"]
    title = "Capacity by scenario and op"
    if _too_short(steps):
        title += f"\nsmoke check: steps under {MIN_RUN_S:g} s, not a comparison"
    plot_capacity(plot, searches, modes, title)
    lines = [
        f"## Capacity: the highest rate each mode sustains (p99 ≤ {slo_ms:g} ms, ≥ 95 % of the asked rate, "
        "≤ 1 % errors; median of the steps at a rate; a generator that was INVALID, and so made the "
        "figures look worse, does not fail a rate by itself)",
        "",
        "| scenario | op | mode | sustained | lowest rate failed | replica calls / request "
        "| where the search stopped, and why |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in searches:
        mine = [run for run in runs if (run["scenario"], run["op"]) == (row["scenario"], row["op"])]
        calls = _calls(_median_calls(mine, row["mode"]))
        failed = rate_label(row["lowest_failed"]) if row.get("lowest_failed") else "none"
        lines.append(
            f"| {row['scenario']} | {row['op'].upper()} | {row['mode']} | {sustained_label(row)} | "
            f"{failed} | {calls} | {row['stopped']} |"
        )
    return [*lines, "", f"![capacity by scenario, op and mode]({plot.relative_to(out)})", ""]


def _run_table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| asked/s | mode | run | succeeded/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors "
        "| replica calls / req | generator µs CPU / req | lateness p99 ms | verdict |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for run in sorted(runs, key=lambda run: (run["asked_rate"], run["mode"], run["kind"], run["step"])):
        latency, generator = run["latency_ms"], run["generator"]
        errors = ", ".join(f"{status}: {count}" for status, count in run["errors"].items()) or "0"
        calls = run["replica_calls"]
        kind = "common rate" if run["kind"] == "rate" else f"search step {run['step'] + 1}"
        # Runs written before the error rule carry the generator's verdict alone.
        judged = run if "valid" in run else generator
        verdict = "VALID" if judged["valid"] else "INVALID: " + "; ".join(judged["invalid_reasons"])
        cells = [
            f"{run['asked_rate']:g}",
            run["mode"],
            kind,
            f"{run['achieved_rate']:.0f}",
            *(f"{latency[p]:.2f}" for p in ("p50", "p90", "p99", "p99.9", "max")),
            errors,
            _calls(calls["per_request"] if calls else None),
            f"{generator['cpu_us_per_request']:.1f}",
            f"{generator['lateness_ms']['p99']:.2f}",
            verdict,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# --- plots ---------------------------------------------------------------------------------------------
