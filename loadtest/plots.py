"""The compare report's plots (loadtest.report writes the words around them): capacity bars, p99 and the
achieved rate by asked rate, and latency by percentile; every mode keeps one colour, marker and line style
in every plot, so no line hides another. Also the labels the report's words share with them, and the
scaling report's figures by cluster shape (:func:`plot_samples`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullLocator

from kvnode.metrics import LatencyHistogram

__all__ = [
    "OPS",
    "Run",
    "capacity_runs",
    "plot_capacity",
    "plot_rates",
    "plot_samples",
    "plot_spectra",
    "rate_label",
    "search_of",
    "sustained_label",
]

Run = dict[str, Any]
OPS = ("put", "get")
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
_MARKERS = ("o", "s", "^", "D", "v", "P")
_LINESTYLES: tuple[Any, ...] = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)))


def rate_label(rate: float | None) -> str:
    return f"{rate:,.0f}/s" if rate else "nothing"


def sustained_label(search: Run) -> str:
    """The rate a search sustained; "≥" when no higher rate failed (its budget ran out first)."""
    bound = "≥ " if search["sustained"] and search.get("lowest_failed") is None else ""
    return bound + rate_label(search["sustained"])


def _style(modes: Sequence[str], mode: str) -> dict[str, Any]:
    """The mode's colour, marker and line style, the same in every plot."""
    index = modes.index(mode) if mode in modes else len(modes)
    return {
        "color": _COLOURS[index % len(_COLOURS)],
        "marker": _MARKERS[index % len(_MARKERS)],
        "linestyle": _LINESTYLES[index % len(_LINESTYLES)],
    }


def plot_capacity(path: Path, searches: Sequence[Run], modes: Sequence[str], title: str) -> None:
    groups = list(dict.fromkeys((row["scenario"], row["op"]) for row in searches))
    figure, axes = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) * max(1, len(modes)) / 2), 4.5))
    width = 0.8 / max(1, len(modes))
    for index, mode in enumerate(modes):
        style = _style(modes, mode)
        heights = [(search_of(searches, *group, mode) or {}).get("sustained") or 0 for group in groups]
        xs = [position + (index - (len(modes) - 1) / 2) * width for position in range(len(groups))]
        hatch = ("", "//", "..", "xx", "\\\\", "++")[index % 6]
        bars = axes.bar(xs, heights, width, color=style["color"], hatch=hatch, edgecolor="black", label=mode)
        rows = [search_of(searches, *group, mode) for group in groups]
        axes.bar_label(
            bars, [sustained_label(row) if row else "" for row in rows], fontsize=7, rotation=90, padding=2
        )
    axes.set_xticks(range(len(groups)))
    axes.set_xticklabels([f"{scenario}\n{op.upper()}" for scenario, op in groups], fontsize=8)
    axes.set_ylabel("highest rate sustained (requests/s)")
    axes.set_title(title)
    # Headroom above the tallest bar for its upright label, so no label reaches the title.
    tallest = max((row.get("sustained") or 0 for row in searches), default=0)
    axes.set_ylim(0, max(1.0, tallest) * 1.25)
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_rates(
    path: Path,
    runs: Sequence[Run],
    searches: Sequence[Run],
    modes: Sequence[str],
    scenario: str,
    slo_ms: float,
) -> None:
    """p99 (top) and achieved share of the asked rate (bottom) against the asked rate, PUT and GET side by
    side: every run as a marker (hollow: INVALID), each mode's median per rate as a line, and a dotted
    vertical line at the rate each mode sustained."""
    figure, grid = plt.subplots(2, len(OPS), figsize=(6 * len(OPS), 8), squeeze=False, sharex="col")
    for column, op in enumerate(OPS):
        top, bottom = grid[0][column], grid[1][column]
        for mode in modes:
            mine = [run for run in runs if run["op"] == op and run["mode"] == mode]
            if not mine:
                continue
            style = _style(modes, mode)
            for axes, value in (
                (top, lambda run: max(run["latency_ms"]["p99"], 0.001)),
                (bottom, lambda run: 100 * run["achieved_rate"] / run["asked_rate"]),
            ):
                _plot_mode(axes, mine, value, mode, style)
            sustained = (search_of(searches, scenario, op, mode) or {}).get("sustained")
            if sustained:
                for axes in (top, bottom):
                    axes.axvline(sustained, color=style["color"], linestyle=":", linewidth=1)
        top.axhline(slo_ms, color="black", linestyle=":", linewidth=1, label=f"SLO {slo_ms:g} ms")
        top.set_yscale("log")
        _plain_ticks(top)
        top.set_ylabel("p99 latency (ms, from intended send time)")
        top.set_title(f"{scenario}: {op.upper()}  (dotted verticals: rate sustained)")
        bottom.axhline(95, color="black", linestyle=":", linewidth=1, label="95 % of asked")
        bottom.set_ylabel("succeeded, % of the asked rate")
        bottom.set_xlabel("asked rate (requests/s)")
        for axes in (top, bottom):
            axes.grid(True, which="both", alpha=0.3)
            axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _plot_mode(axes: Axes, runs: Sequence[Run], value: Any, mode: str, style: dict[str, Any]) -> None:
    """One mode's runs as markers (filled VALID, hollow INVALID) and its median per rate as a line."""
    by_rate: dict[float, list[float]] = {}
    for run in runs:
        by_rate.setdefault(run["asked_rate"], []).append(value(run))
        face = style["color"] if run["generator"]["valid"] else "none"
        axes.plot(
            [run["asked_rate"]],
            [value(run)],
            style["marker"],
            color=style["color"],
            markerfacecolor=face,
            alpha=0.6,
        )
    rates = sorted(by_rate)
    axes.plot(
        rates,
        [statistics.median(by_rate[rate]) for rate in rates],
        color=style["color"],
        linestyle=style["linestyle"],
        marker=style["marker"],
        linewidth=1.6,
        label=mode,
    )


def search_of(searches: Sequence[Run], scenario: str, op: str, mode: str) -> Run | None:
    return next(
        (row for row in searches if (row["scenario"], row["op"], row["mode"]) == (scenario, op, mode)), None
    )


def capacity_runs(runs: Sequence[Run], searches: Sequence[Run]) -> list[Run]:
    """Per mode, the search step at its sustained rate with the median p99: its latency at capacity."""
    chosen = []
    for row in searches:
        steps = [
            run
            for run in runs
            if run["kind"] == "search"
            and (run["scenario"], run["op"], run["mode"]) == (row["scenario"], row["op"], row["mode"])
            and run["asked_rate"] == row["sustained"]
        ]
        if steps:
            chosen.append(sorted(steps, key=lambda run: run["latency_ms"]["p99"])[len(steps) // 2])
    return chosen


def plot_spectra(
    path: Path,
    out: Path,
    runs: Sequence[Run],
    capacity: Sequence[Run],
    modes: Sequence[str],
    title: str,
    slo_ms: float,
) -> None:
    """Latency by percentile, one panel per common rate and one at each mode's capacity, modes side by
    side in each; on HdrHistogram's axis, x = 1/(1-p): 90 %, 99 %, 99.9 % evenly spaced."""
    rates = sorted({run["asked_rate"] for run in runs if run["kind"] == "rate"})
    panels: list[tuple[str, list[Run]]] = [
        (f"{rate:g}/s", [run for run in runs if run["kind"] == "rate" and run["asked_rate"] == rate])
        for rate in rates
    ]
    if capacity:
        panels.append(("at each mode's capacity", list(capacity)))
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure, grid = plt.subplots(rows, columns, figsize=(5.5 * columns, 4.2 * rows), squeeze=False)
    for index, (name, mine) in enumerate(panels):
        axes = grid[index // columns][index % columns]
        nines = 1
        for run in sorted(mine, key=lambda run: modes.index(run["mode"]) if run["mode"] in modes else 0):
            histogram = LatencyHistogram.decode((out / run["hdr"]).read_text().strip())
            if not histogram.count:
                continue
            # Beyond 1 - 1/count every percentile is the maximum: stop the curve there.
            top = math.log10(histogram.count)
            nines = max(nines, math.ceil(top))
            exponents = [top * step / 100 for step in range(101)]
            style = _style(modes, run["mode"])
            label = run["mode"] + (f" @ {run['asked_rate']:g}/s" if run["kind"] == "search" else "")
            axes.plot(
                [10**exponent for exponent in exponents],
                [histogram.percentile_ms(100 * (1 - 10**-exponent)) for exponent in exponents],
                color=style["color"],
                linestyle=style["linestyle"],
                marker=style["marker"],
                markevery=20,
                linewidth=1.6,
                label=label,
            )
        axes.axhline(slo_ms, color="black", linestyle=":", linewidth=1, label=f"SLO {slo_ms:g} ms")
        axes.set_xscale("log")
        axes.set_xlim(1, 10**nines)
        axes.xaxis.set_major_locator(FixedLocator([10**k for k in range(nines + 1)]))
        axes.xaxis.set_minor_locator(NullLocator())
        axes.set_xticklabels([_percentile_label(k) for k in range(nines + 1)])
        axes.set_yscale("log")
        _plain_ticks(axes)
        axes.set_xlabel("percentile")
        axes.set_ylabel("latency (ms)")
        axes.set_title(f"{title} {name}", fontsize=10)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
    for index in range(len(panels), rows * columns):
        grid[index // columns][index % columns].axis("off")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_samples(
    path: Path,
    labels: Sequence[str],
    panels: Sequence[tuple[str, list[list[float]], float | None]],
    title: str,
) -> None:
    """One panel per figure (its y label, its samples for each of ``labels``, a reference drawn as a dotted
    line or None), three to a row: every sample a marker, the medians joined by a line, y from zero (or
    below, for a negative sample) so a change looks as large as it is."""
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure, grid = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.8 * rows), squeeze=False)
    style = _style([""], "")
    for index, (ylabel, samples, reference) in enumerate(panels):
        axes = grid[index // columns][index % columns]
        for position, values in enumerate(samples):
            axes.plot([position] * len(values), values, style["marker"], color=style["color"], alpha=0.5)
        medians = [(position, statistics.median(values)) for position, values in enumerate(samples) if values]
        if medians:
            positions, middles = zip(*medians, strict=True)
            axes.plot(positions, middles, color=style["color"], linestyle=style["linestyle"], label="median")
        if reference is not None:
            axes.axhline(reference, color="black", linestyle=":", linewidth=1, label=f"{reference:g}")
        everything = [reference or 0.0, *(value for values in samples for value in values)]
        axes.set_ylim(min(0.0, min(everything) * 1.15), max(1.0, max(everything) * 1.15))
        axes.set_xticks(range(len(labels)))
        axes.set_xticklabels(labels, fontsize=8)
        axes.set_xlim(-0.5, len(labels) - 0.5)
        axes.set_ylabel(ylabel, fontsize=9)
        axes.grid(True, axis="y", alpha=0.3)
        axes.legend(fontsize=8, loc="lower right")
    for index in range(len(panels), rows * columns):
        grid[index // columns][index % columns].axis("off")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


class _PlainLogFormatter(LogFormatter):
    """Labels the ticks matplotlib's LogFormatter would label, as plain numbers: 0.6, 2, 50, never 6e-01."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def _plain_ticks(axes: Axes) -> None:
    """Log-scale y labels as plain numbers (0.5, 2, 10, 50), major and minor ticks alike."""
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def _percentile_label(nines: int) -> str:
    return "0%" if nines == 0 else f"{100 * (1 - 10**-nines):.{max(0, nines - 2)}f}%"
