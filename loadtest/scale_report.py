"""The scaling report (pure but for :func:`write_report`): scale.md, whose figures state their samples
(:mod:`loadtest.scale_figures`), with a conclusion that claims only what those runs show, and scale.png."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loadtest.plots import plot_samples
from loadtest.report import MIN_RUN_REQUESTS, MIN_RUN_S
from loadtest.scale_figures import (
    Figure,
    Run,
    ShapeSummary,
    round_ratios,
    shape_of,
    summarise,
    too_short,
    work_us,
)

__all__ = ["CALLS_TOLERANCE", "KEPT_UP", "WORK_BOUND", "conclusion", "report_text", "write_report"]

WORK_BOUND = 1.2  # server CPU per request of the largest shape within this factor of the smallest's
KEPT_UP = 0.95  # a run kept up with the asked rate when it achieved this much of it (as capacity judges)
CALLS_TOLERANCE = 0.02  # replica calls per request within 2 % of from: read repair and rewrites are rare


def conclusion(
    summaries: Sequence[ShapeSummary],
    from_: int,
    rate: float,
    rounds: tuple[Figure, Figure] | None = None,  # round_ratios of the smallest shape and the largest
) -> list[str]:
    """Bullets drawn from the figures alone, smallest shape against largest; none from runs under the
    minimums (a smoke check says so instead)."""
    if not summaries:
        return ["- No run finished."]
    if too_short(summaries):
        return [
            f"- Smoke check: some runs lasted under {MIN_RUN_S:g} s or had fewer than {MIN_RUN_REQUESTS:,} "
            "requests: nothing is concluded; the tables show what ran."
        ]
    first, last = summaries[0], summaries[-1]
    lines = [
        _work_line(first, last, rate),
        *_rounds_line(first, last, rounds),
        *_idle_line(first, last, rate),
        _calls_line(summaries, from_),
        _throughput_line(summaries, rate),
        _p99_line(first, last),
    ]
    invalid = sum(row.invalid for row in summaries)
    runs = sum(row.runs for row in summaries)
    if invalid:
        lines.append(
            f"- {invalid} of {runs} runs were INVALID (the generator set the pace, or over 1 % of requests "
            "failed; the runs table says why): their figures describe the generator as much as the cluster."
        )
    return lines


def _work_line(first: ShapeSummary, last: ShapeSummary, rate: float) -> str:
    if first.work_us is None or last.work_us is None:
        return "- Work per request: not measured (no idle reading, or a node's /proc/PID/stat unread)."
    behind = [row.shape.label for row in (first, last) if row.throughput.low < KEPT_UP * rate]
    if behind:
        return (
            f"- Work per request: not compared: at {' and at '.join(behind)} some runs fell under "
            f"{KEPT_UP:.0%} of the asked rate, so their CPU figures describe an overloaded machine, where "
            "the idle cluster's own CPU no longer adds to the requests' (a lower --rate compares them)."
        )
    if min(first.work_us.median, last.work_us.median) <= 0:
        return (
            "- Work per request: not compared: the idle cluster's CPU over a run's span came to more than "
            "the run's own, so the idle reading does not describe that run (a longer --idle reads it better)."
        )
    ratio = last.work_us.median / first.work_us.median
    verdict = "within" if ratio <= WORK_BOUND else "**beyond**"
    return (
        f"- **Work per request**: server CPU per request (every node process summed), less what the idle "
        f"cluster uses over as long, is {ratio:.2f}x at {last.shape.label} what it is at "
        f"{first.shape.label} ({last.work_us.text('{:,.0f}')} µs against {first.work_us.text('{:,.0f}')} "
        f"µs), {verdict} the {WORK_BOUND:g}x bound."
    )


def _rounds_line(first: ShapeSummary, last: ShapeSummary, rounds: tuple[Figure, Figure] | None) -> list[str]:
    """The same comparison round by round, where the runs of a round were minutes apart."""
    if rounds is None:
        return []
    less_idle, total = rounds
    return [
        f"- **Round by round**, each round's {last.shape.members}-member run against the same round's "
        f"{first.shape.members}-member one: {less_idle.text('{:.2f}x')} less idle, {total.text('{:.2f}x')} "
        "with the idle background (the median, lowest-highest and number of rounds)."
    ]


def _idle_line(first: ShapeSummary, last: ShapeSummary, rate: float) -> list[str]:
    """The idle cluster's own CPU, and the CPU per request with it, smallest shape against largest."""
    if not (first.idle and last.idle and first.cpu_us and last.cpu_us):
        return []

    def per_s(row: ShapeSummary, key: str) -> float:
        assert row.idle is not None
        return float(row.idle[key] / row.idle["idle_s"])

    pools = (first.idle, last.idle)
    counts = sorted({pool.get("readings", 1) for pool in pools})
    seconds = _seconds([pool["idle_s"] / pool.get("readings", 1) for pool in pools])
    readings = f"{'-'.join(map(str, counts))} reading(s) of {seconds} s each a shape"
    calls = ""
    if first.idle["idle_calls"] is not None and last.idle["idle_calls"] is not None:
        calls = (
            f", making {per_s(first, 'idle_calls'):,.0f} and {per_s(last, 'idle_calls'):,.0f} replica calls "
            "a second of its own"
        )
    return [
        f"- **Idle background**: the idle cluster used {per_s(first, 'idle_cpu_s'):.3f} s of CPU a second at "
        f"{first.shape.members} members and {per_s(last, 'idle_cpu_s'):.3f} at {last.shape.members}{calls} "
        f"({readings}). With it, server CPU per request is "
        f"{last.cpu_us.median / first.cpu_us.median:.2f}x at {last.shape.members} members what it is at "
        f"{first.shape.members} ({last.cpu_us.text('{:,.0f}')} µs against {first.cpu_us.text('{:,.0f}')} "
        f"µs) at {rate:,.0f}/s; a higher rate spreads the background over more requests."
    ]


def _seconds(values: Sequence[float]) -> str:
    return "-".join(dict.fromkeys(f"{value:.1f}" for value in sorted(values)))


def _calls_line(summaries: Sequence[ShapeSummary], from_: int) -> str:
    measured = [row for row in summaries if row.calls is not None]
    if not measured:
        return "- Replica calls per request: not measured (no node exposed kvnode_replica_calls_total)."
    off = [
        row
        for row in measured
        if row.calls is not None
        and max(abs(row.calls.low - from_), abs(row.calls.high - from_)) > CALLS_TOLERANCE * from_
    ]
    figures = "; ".join(f"{row.shape.members}: {row.calls.text('{:.3f}')}" for row in measured if row.calls)
    if not off:
        return (
            f"- **Replica calls per request equal from = {from_}** within {CALLS_TOLERANCE:.0%} in every "
            f"run of every shape ({figures}): a request cost the same calls at every size measured."
        )
    names = ", ".join(row.shape.label for row in off)
    return (
        f"- Replica calls per request strayed over {CALLS_TOLERANCE:.0%} from from = {from_} at {names} "
        f"({figures})."
    )


def _throughput_line(summaries: Sequence[ShapeSummary], rate: float) -> str:
    short = [row for row in summaries if row.throughput.low < KEPT_UP * rate]
    fixed = (
        "The rate is fixed, so throughput says whether the cluster kept up with it, not how much more a "
        "larger cluster could take (its capacity)."
    )
    if not short:
        every = f"every run of every shape achieved at least {KEPT_UP:.0%} of the asked {rate:,.0f}/s"
        return f"- Throughput: {every}. {fixed}"
    names = ", ".join(f"{row.shape.label} ({row.throughput.text('{:,.0f}')}/s)" for row in short)
    return f"- Throughput: some runs fell under {KEPT_UP:.0%} of the asked {rate:,.0f}/s: {names}. {fixed}"


def _p99_line(first: ShapeSummary, last: ShapeSummary) -> str:
    a, b = first.p99_ms, last.p99_ms
    figures = f"{first.shape.members}: {a.text('{:.2f}')} ms; {last.shape.members}: {b.text('{:.2f}')} ms"
    if a.below(b) or b.below(a):
        higher = "higher" if a.below(b) else "lower"
        where = f"at {last.shape.label} than in any at {first.shape.label}"
        return f"- p99 was {higher} in every run {where} ({figures})."
    return f"- p99: the ranges of the runs overlap ({figures}), so these runs show no difference."


def _table(summaries: Sequence[ShapeSummary]) -> list[str]:
    lines = [
        "| shape | runs | requests | throughput (/s) | p99 (ms) | replica calls / request "
        "| server CPU / request (µs) | less idle (µs) | idle CPU (s a second) |",
        "|---|---:|---:|---|---|---|---|---|---:|",
    ]
    for row in summaries:
        idle = row.idle
        cells = [
            row.shape.label,
            str(row.runs),
            f"{row.requests:,}",
            row.throughput.text("{:,.0f}"),
            row.p99_ms.text("{:.2f}"),
            row.calls.text("{:.3f}") if row.calls else "n/a",
            row.cpu_us.text("{:,.0f}") if row.cpu_us else "n/a",
            row.work_us.text("{:,.0f}") if row.work_us else "n/a",
            f"{idle['idle_cpu_s'] / idle['idle_s']:.3f}" if idle else "n/a",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _runs_table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| shape | run | succeeded/s | p50 ms | p99 ms | errors | replica calls / req | server CPU µs / req "
        "| verdict |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for run in sorted(runs, key=lambda run: (shape_of(run), run["repeat"])):
        calls, cpu = run["replica_calls"], run["server_cpu_us_per_request"]
        errors = ", ".join(f"{status}: {count}" for status, count in run["errors"].items()) or "0"
        cells = [
            shape_of(run).label,
            str(run["repeat"] + 1),
            f"{run['achieved_rate']:,.0f}",
            f"{run['latency_ms']['p50']:.2f}",
            f"{run['latency_ms']['p99']:.2f}",
            errors,
            f"{calls['per_request']:.3f}" if calls else "n/a",
            f"{cpu:,.0f}" if cpu else "n/a",
            "VALID" if run["valid"] else "INVALID: " + "; ".join(run["invalid_reasons"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report_text(results: dict[str, Any], plot: str) -> str:
    """scale.md from results.json's contents (settings, header, runs, idle); ``plot``: the plot's file."""
    runs, settings = results["runs"], results["settings"]
    summaries = summarise(runs, results["idle"])
    labels = " vs ".join(row.shape.label for row in summaries)
    title = f"# kvnode scaling: one constant-rate load on {labels}"
    if too_short(summaries):
        title = f"# Smoke check: kvnode scaling ran end to end on {labels}; too short to conclude"
    lines = [title, "", "## Conclusion", ""]
    rounds = (
        round_ratios(runs, results["idle"], summaries[0].shape, summaries[-1].shape) if summaries else None
    )
    lines += conclusion(summaries, settings["replication_factor"], settings["rate"], rounds)
    lines += [
        "",
        "## Figures",
        "",
        "Each cell: the median over the shape's runs, then the lowest-highest and the number of runs (n). "
        "Less idle: server CPU per request less what the same cluster used idle over as long (an idle "
        "reading before each run; the last column pools a shape's).",
        "",
        *_table(summaries),
        "",
        f"![throughput, p99, replica calls and server CPU per request by shape]({plot})",
        "",
        "## How it was measured",
        "",
        *results["header"],
        "",
        "## Runs",
        "",
        *_runs_table(runs),
    ]
    return "\n".join(lines) + "\n"


def write_report(out: Path, results: dict[str, Any]) -> Path:
    """scale.md and scale.png into ``out``; the report's path."""
    summaries = summarise(results["runs"], results["idle"])
    shapes = [row.shape for row in summaries]
    by_shape = [[run for run in results["runs"] if shape_of(run) == shape] for shape in shapes]

    settings = results["settings"]

    def values(key: Callable[[Run, ShapeSummary], float | None]) -> list[list[float]]:
        """Each shape's samples of one figure."""
        pairs = zip(summaries, by_shape, strict=True)
        return [[value for run in mine if (value := key(run, row)) is not None] for row, mine in pairs]

    panels = [
        ("throughput (requests/s)", values(lambda run, _: run["achieved_rate"]), settings["rate"]),
        ("p99 latency (ms)", values(lambda run, _: run["latency_ms"]["p99"]), None),
        (
            "replica calls per request",
            values(lambda run, _: run["replica_calls"]["per_request"] if run["replica_calls"] else None),
            float(settings["replication_factor"]),
        ),
        ("server CPU per request (µs)", values(lambda run, _: run["server_cpu_us_per_request"]), None),
        ("server CPU per request, less idle (µs)", values(lambda run, row: work_us(run, row.idle)), None),
    ]
    repeats = settings["repeats"]
    title = (
        f"{settings['op'].upper()} at {settings['rate']:g}/s, token-aware, replication factor "
        f"{settings['replication_factor']}; {repeats} run{'s' * (repeats > 1)} of {settings['duration']:g} s "
        "a shape"
    )
    if too_short(summaries):
        title += "\nsmoke check: too short to conclude"
    plot = out / "scale.png"
    plot_samples(plot, [shape.tick for shape in shapes], panels, title)
    path = out / "scale.md"
    path.write_text(report_text(results, plot.name))
    return path
