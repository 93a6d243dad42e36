"""A check's plots, with matplotlib (the ``load`` extra, imported only here and only when drawing):
``timeline.png`` (every operation at its completion, by operation and outcome, fault windows shaded),
``latency.png`` (each operation's latency over time by outcome, fault windows shaded) and
``latency-by-outcome.png`` (the latencies of each operation and outcome side by side). Without matplotlib
:class:`PlotsUnavailable` says how to install it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvnode.check.history import Call, Op, calls
from kvnode.check.nemesis import Fault
from kvnode.ops.extras import install_command

__all__ = ["COLOURS", "PlotsUnavailable", "draw"]

COLOURS = {"ok": "tab:green", "fail": "tab:orange", "info": "tab:red"}
_FAULT_COLOURS = {
    "kill": "tab:red",
    "pause": "tab:purple",
    "partition": "tab:blue",
    "clock": "tab:olive",
    "membership": "tab:cyan",
    "disk": "tab:brown",
}


class PlotsUnavailable(Exception):
    """matplotlib is not installed."""


def draw(ops: Sequence[Op], faults: Sequence[Fault], out: Path) -> list[Path]:
    """Draw the three plots into ``out``; their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotsUnavailable(
            f"no plots: matplotlib is not installed (to draw them: {install_command('load')})"
        ) from None
    done = [call for call in calls(ops) if call.completion is not None]
    paths = [out / "timeline.png", out / "latency.png", out / "latency-by-outcome.png"]
    for path, drawing in zip(paths, (_timeline, _latency, _by_outcome), strict=True):
        figure, axes = plt.subplots(figsize=(11, 5))
        drawing(axes, done)
        if drawing is not _by_outcome:
            _shade(axes, faults)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
    return paths


def _seconds(call: Call) -> float:
    assert call.completion is not None
    return call.completion.time / 1e9


def _timeline(axes: Any, done: Sequence[Call]) -> None:
    names = sorted({call.f for call in done})
    rows = {name: row for row, name in enumerate(names)}
    for outcome, colour in COLOURS.items():
        chosen = [call for call in done if call.type == outcome]
        offset = {"ok": 0.0, "fail": 0.2, "info": -0.2}[outcome]
        axes.scatter(
            [_seconds(c) for c in chosen],
            [rows[c.f] + offset for c in chosen],
            s=4,
            c=colour,
            label=f"{outcome} ({len(chosen)})",
        )
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("seconds since the check began (each operation at its completion)")
    axes.set_title("operations by outcome; faults shaded")
    axes.legend(loc="upper right", fontsize="small")


def _latency(axes: Any, done: Sequence[Call]) -> None:
    for outcome, colour in COLOURS.items():
        chosen = [call for call in done if call.type == outcome]
        axes.scatter(
            [_seconds(c) for c in chosen],
            [(c.latency_ns or 0) / 1e6 for c in chosen],
            s=4,
            c=colour,
            label=outcome,
        )
    axes.set_yscale("log")
    axes.set_xlabel("seconds since the check began")
    axes.set_ylabel("latency (ms)")
    axes.set_title("latency over time by outcome; faults shaded")
    axes.legend(loc="upper right", fontsize="small")


def _by_outcome(axes: Any, done: Sequence[Call]) -> None:
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for call in done:
        groups[call.f, call.type].append(max((call.latency_ns or 0) / 1e6, 1e-3))
    labels = sorted(groups)
    if labels:
        boxes = axes.boxplot([groups[label] for label in labels], patch_artist=True, showfliers=True)
        for box, (_, outcome) in zip(boxes["boxes"], labels, strict=True):
            box.set_facecolor(COLOURS[outcome])
        axes.set_xticks(
            range(1, len(labels) + 1), [f"{f}\n{outcome}" for f, outcome in labels], fontsize="small"
        )
    axes.set_yscale("log")
    axes.set_ylabel("latency (ms)")
    axes.set_title("latency by operation and outcome")


def _shade(axes: Any, faults: Sequence[Fault]) -> None:
    labelled: set[str] = set()
    for fault in faults:
        end = fault.ended if fault.ended is not None else fault.started
        label = None if fault.kind in labelled else fault.kind
        labelled.add(fault.kind)
        axes.axvspan(
            fault.started / 1e9,
            max(end, fault.started + 50_000_000) / 1e9,
            alpha=0.15,
            color=_FAULT_COLOURS.get(fault.kind, "grey"),
            label=label,
        )
    if faults:
        axes.legend(loc="upper right", fontsize="small")
