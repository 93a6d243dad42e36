"""The compare report: ``report.md`` with one table per scenario and operation, and the PNG plots.

Input is the list of runs :mod:`loadtest.compare` writes to ``results.json`` (one dict per run: scenario,
mode, op, kind, the file of its histogram, and :meth:`RateResult.to_json`), so a report can be redrawn
from a finished run's directory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, NullLocator

from kvnode.metrics import LatencyHistogram

__all__ = ["Run", "write_report"]

Run = dict[str, Any]
_MODE_STYLE = {"async": "-", "sync": "--"}
_MODE_MARKER = {"async": "o", "sync": "s"}
_OPS = ("put", "get")


def write_report(
    out: Path, runs: Sequence[Run], header: Iterable[str], sustained: Sequence[Run], slo_ms: float
) -> Path:
    """Write report.md and the plots into ``out``; the report's path.

    ``sustained`` holds one dict per scenario/op/mode with the highest rate that met the p99 objective
    ``slo_ms`` ("rate", None when no rate did).
    """
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    scenarios = list(dict.fromkeys(run["scenario"] for run in runs))
    lines = ["# kvnode: async vs sync replica fan-out", "", *header, ""]
    lines += _sustained_table(sustained, slo_ms)
    rates_plot = plots / "achieved-vs-asked.png"
    _plot_rates(rates_plot, runs, scenarios)
    lines += ["", f"![achieved vs asked rate]({rates_plot.relative_to(out)})", ""]
    for scenario in scenarios:
        lines += [f"## {scenario}", ""]
        for op in _OPS:
            mine = [run for run in runs if run["scenario"] == scenario and run["op"] == op]
            if not mine:
                continue
            lines += [f"### {op.upper()}", "", *_rate_table(mine), ""]
            fixed = [run for run in mine if run["kind"] == "rate"]
            if fixed:
                plot = plots / f"latency-{scenario}-{op}.png"
                title = f"{scenario}: {op.upper()} latency by percentile"
                _plot_percentiles(plot, out, fixed, title, slo_ms)
                lines += [f"![{scenario} {op} latency by percentile]({plot.relative_to(out)})", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def _sustained_table(sustained: Sequence[Run], slo: float) -> list[str]:
    if not sustained:
        return []
    modes = list(dict.fromkeys(row["mode"] for row in sustained))
    lines = [
        f"## Highest rate sustained (p99 ≤ {slo:g} ms, achieved ≥ 95% of asked, errors ≤ 1%)",
        "",
        "| scenario | op | " + " | ".join(f"{mode} (req/s)" for mode in modes) + " |",
        "|---|---|" + "---:|" * len(modes),
    ]
    keys = list(dict.fromkeys((row["scenario"], row["op"]) for row in sustained))
    for scenario, op in keys:
        by_mode = {
            row["mode"]: row["rate"] for row in sustained if (row["scenario"], row["op"]) == (scenario, op)
        }
        cells = [f"{by_mode[mode]:g}" if by_mode.get(mode) else "none" for mode in modes]
        lines.append(f"| {scenario} | {op.upper()} | " + " | ".join(cells) + " |")
    return lines


def _rate_table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| asked (req/s) | mode | achieved | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors | run |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for run in sorted(runs, key=lambda run: (run["asked_rate"], run["mode"])):
        latency = run["latency_ms"]
        errors = ", ".join(f"{status}: {count}" for status, count in run["errors"].items()) or "0"
        notes = [run["kind"]] + (["generator behind"] if run["generator_fell_behind"] else [])
        cells = [
            f"{run['asked_rate']:g}",
            run["mode"],
            f"{run['achieved_rate']:.0f}",
            *(f"{latency[p]:.2f}" for p in ("p50", "p90", "p99", "p99.9", "max")),
            errors,
            ", ".join(notes),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _plot_percentiles(path: Path, out: Path, runs: Sequence[Run], title: str, slo_ms: float) -> None:
    """Latency by percentile on HdrHistogram's axis, x = 1/(1-p): 90%, 99%, 99.9% evenly spaced."""
    figure, axes = plt.subplots(figsize=(9, 5.5))
    rates = sorted({run["asked_rate"] for run in runs})
    colors = plt.get_cmap("viridis")([index / max(1, len(rates) - 1) * 0.85 for index in range(len(rates))])
    nines = 1
    for run in sorted(runs, key=lambda run: (run["asked_rate"], run["mode"])):
        histogram = LatencyHistogram.decode((out / run["hdr"]).read_text().strip())
        if not histogram.count:
            continue
        # Beyond 1 - 1/count every percentile is the maximum: stop the curve there.
        top = math.log10(histogram.count)
        nines = max(nines, math.ceil(top))
        exponents = [top * step / 200 for step in range(201)]
        xs = [10**exponent for exponent in exponents]
        ys = [histogram.percentile_ms(100 * (1 - 10**-exponent)) for exponent in exponents]
        color = colors[rates.index(run["asked_rate"])]
        label = f"{run['mode']} @ {run['asked_rate']:g}/s"
        axes.plot(xs, ys, _MODE_STYLE.get(run["mode"], ":"), color=color, label=label, linewidth=1.6)
    axes.axhline(slo_ms, color="tab:red", linestyle=":", linewidth=1, label=f"SLO {slo_ms:g} ms")
    axes.set_xscale("log")
    axes.set_xlim(1, 10**nines)
    ticks = [10**k for k in range(nines + 1)]
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xticklabels([_percentile_label(k) for k in range(nines + 1)])
    axes.set_yscale("log")
    axes.set_xlabel("percentile")
    axes.set_ylabel("latency (ms, from intended send time)")
    axes.set_title(title + "  (solid: async, dashed: sync)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _percentile_label(nines: int) -> str:
    return "0%" if nines == 0 else f"{100 * (1 - 10**-nines):.{max(0, nines - 2)}f}%"


def _plot_rates(path: Path, runs: Sequence[Run], scenarios: Sequence[str]) -> None:
    figure, all_axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 4.5), squeeze=False)
    for axes, scenario in zip(all_axes[0], scenarios, strict=True):
        mine = [run for run in runs if run["scenario"] == scenario]
        top = max(run["asked_rate"] for run in mine)
        axes.plot([0, top], [0, top], ":", color="grey", label="achieved = asked")
        for op, color in zip(_OPS, ("tab:blue", "tab:orange"), strict=True):
            for mode in _MODE_STYLE:
                points = sorted(
                    (run["asked_rate"], run["achieved_rate"])
                    for run in mine
                    if run["op"] == op and run["mode"] == mode
                )
                if points:
                    xs, ys = zip(*points, strict=True)
                    axes.plot(
                        xs, ys, _MODE_STYLE[mode], marker="o", color=color, label=f"{op.upper()} {mode}"
                    )
        axes.set_title(scenario)
        axes.set_xlabel("asked (requests/s)")
        axes.set_ylabel("achieved (requests/s)")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
