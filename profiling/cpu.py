"""CPU per request from /proc next to py-spy's samples, and the conclusion the report opens with.

Two measures of the coordinator's work, each with its blind spot:

- ``/proc``: the node's user + system CPU time over the load window (record.py reads it before and
  after), divided by the requests answered. It counts everything the process ran (Python, C, kernel)
  and nothing it waited for, but not where.
- py-spy's samples of the ``cpu`` phase, split by their innermost frame (collapsed.split_samples): in
  Python code, in the event loop's own frame (its poll, or uvloop's C code, which has no frame of its
  own), or without a Python frame. A sample says where the thread was, not that it had a core. py-spy
  drops a thread the OS reports sleeping, yet the loop's own frame keeps far more samples than /proc
  has CPU time for, so they count as waiting, and a runnable thread waiting for one of the shared cores
  is sampled too.

The conclusion states only what both show: a difference between the modes goes in only when /proc and
the Python samples point the same way by at least ``DIFFERENCE``. And it states only what enough of
them show: a count of n events is uncertain by about its square root, so a 10 % difference between two
counts needs about 1,000 on each side to stand out. No statement rests on a run whose coordinator
counted fewer than ``MIN_CLOCK_TICKS`` clock ticks of CPU (``/proc`` counts in ticks) or whose profile
holds fewer than ``MIN_SAMPLES`` samples (of Python code, for CPU; all of them, for waiting); each
statement gives the counts it rests on, and a report whose runs fall short is a smoke check.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt

from profiling.collapsed import SampleSplit, parse_collapsed, split_samples
from profiling.pyspy import MIN_SAMPLES

__all__ = [
    "DIFFERENCE",
    "MIN_CLOCK_TICKS",
    "MIN_SAMPLES",
    "RunCpu",
    "conclusion",
    "cpu_table",
    "plot_cpu",
    "run_cpu",
    "shortfalls",
]

DIFFERENCE = 1.10  # a ratio between the modes below this is no difference
MIN_CLOCK_TICKS = 100  # of the coordinator's CPU by /proc, per run, for any statement on its CPU
COORDINATOR = "n1"
_DEFAULT_SAMPLE_RATE = 100  # run.json files written before it recorded py-spy's rate


@dataclass(frozen=True)
class RunCpu:
    """One run's CPU figures from its ``cpu`` phase (n1 is the coordinator; every node has /proc)."""

    run: str
    mode: str
    op: str
    requests: int
    window_s: float
    cpu_s: dict[str, float]  # node -> CPU seconds over the load window; empty in older runs
    sample_rate: int
    samples: SampleSplit | None  # n1's cpu-phase samples
    idle: SampleSplit | None  # n1's idle-phase samples (--idle: waiting threads included)

    @property
    def clock_ticks(self) -> int | None:
        """n1's CPU over the load window in /proc's own unit, clock ticks."""
        if COORDINATOR not in self.cpu_s:
            return None
        return round(self.cpu_s[COORDINATOR] * os.sysconf("SC_CLK_TCK"))

    @property
    def python_samples(self) -> int:
        return self.samples.python_samples if self.samples else 0

    @property
    def idle_samples(self) -> int:
        return self.idle.total if self.idle else 0

    @property
    def cpu_shortfall(self) -> str | None:
        """Why this run's CPU figures are too few to state anything (None: they are enough)."""
        ticks = self.clock_ticks or 0
        if ticks >= MIN_CLOCK_TICKS and self.python_samples >= MIN_SAMPLES:
            return None
        return f"{self.run}: {ticks:,} clock ticks, {self.python_samples:,} samples in Python code"

    def proc_us(self, node: str = COORDINATOR) -> float | None:
        """CPU per request of ``node`` from /proc, in µs."""
        if node not in self.cpu_s or not self.requests:
            return None
        return self.cpu_s[node] / self.requests * 1e6

    @property
    def cluster_us(self) -> float | None:
        if not self.cpu_s or not self.requests:
            return None
        return sum(self.cpu_s.values()) / self.requests * 1e6

    def samples_us(self, samples: int) -> float | None:
        """``samples`` of n1's cpu profile as time per request: samples x interval / requests, in µs."""
        if self.samples is None or not self.requests:
            return None
        return samples / self.sample_rate / self.requests * 1e6

    @property
    def sampled_us(self) -> float | None:
        """n1's time in Python code per request by the samples: samples x interval / requests, in µs."""
        return self.samples_us(self.samples.python_samples if self.samples else 0)

    @property
    def all_sampled_us(self) -> float | None:
        """All of n1's cpu-profile samples x interval per request, the loop's own frame included, in µs."""
        return self.samples_us(self.samples.total if self.samples else 0)

    @property
    def busy_share(self) -> float | None:
        """The share of the load window n1 used a core, by /proc."""
        if COORDINATOR not in self.cpu_s or not self.window_s:
            return None
        return self.cpu_s[COORDINATOR] / self.window_s

    @property
    def waiting_share(self) -> float | None:
        """The share of n1's --idle samples that were waiting."""
        if self.idle is None or not self.idle.total:
            return None
        return self.idle.waiting_samples / self.idle.total


def _phase(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next((phase for phase in manifest["phases"] if phase["phase"] == name), {})


def _split(run_dir: Path, phase: dict[str, Any], kind: str) -> SampleSplit | None:
    raw = next(
        (
            artifact
            for artifact in phase.get("artifacts", [])
            if artifact["kind"] == kind and artifact["format"] == "raw" and artifact["node"] == COORDINATOR
        ),
        None,
    )
    if raw is None:
        return None
    return split_samples(parse_collapsed((run_dir / raw["path"]).read_text()))


def run_cpu(run_dir: Path, manifest: dict[str, Any]) -> RunCpu:
    cpu_phase = _phase(manifest, "cpu")
    return RunCpu(
        run=manifest["run"],
        mode=manifest["spec"]["mode"],
        op=manifest["spec"]["op"],
        requests=int(cpu_phase.get("load", {}).get("requests") or 0),
        window_s=float(cpu_phase.get("window_s") or 0.0),
        cpu_s=dict(cpu_phase.get("cpu_s") or {}),
        sample_rate=int(manifest.get("sample_rate_hz") or _DEFAULT_SAMPLE_RATE),
        samples=_split(run_dir, cpu_phase, "cpu"),
        idle=_split(run_dir, _phase(manifest, "idle"), "idle"),
    )


def _ratio(first: float | None, second: float | None) -> float | None:
    return first / second if first is not None and second else None


def _compare_modes(op: str, first: RunCpu, second: RunCpu) -> str:
    """One line comparing two modes' coordinator CPU per request, claiming only what both measures show."""
    proc = _ratio(first.proc_us(), second.proc_us())
    sampled = _ratio(first.sampled_us, second.sampled_us)
    figures = (
        f"/proc {_us(first.proc_us())} vs {_us(second.proc_us())} per request ({_times(proc)}), "
        f"Python samples {_us(first.sampled_us)} vs {_us(second.sampled_us)} ({_times(sampled)})"
    )
    if proc is None or sampled is None:
        missing = "CPU figures from /proc" if proc is None else "cpu-profile samples"
        return f"**{op}: no conclusion on {first.mode} vs {second.mode}**: no {missing} ({figures})."
    short = [run.cpu_shortfall for run in (first, second) if run.cpu_shortfall]
    if short:
        return (
            f"**{op}: {first.mode} and {second.mode} not compared: too few samples** ({'; '.join(short)}; "
            f"a comparison needs {_minimums()} per run)."
        )
    figures += (
        f"; from {first.clock_ticks:,} vs {second.clock_ticks:,} clock ticks and "
        f"{first.python_samples:,} vs {second.python_samples:,} samples in Python code"
    )
    if proc >= DIFFERENCE and sampled >= DIFFERENCE:
        more, less = first, second
    elif proc <= 1 / DIFFERENCE and sampled <= 1 / DIFFERENCE:
        more, less = second, first
    else:
        return (
            f"**{op}: no difference between {first.mode} and {second.mode} that both measures show** "
            f"(a difference counts from {DIFFERENCE - 1:.0%}): {figures}."
        )
    return (
        f"**{op}: {more.mode} costs the coordinator more CPU per request than {less.mode}**; "
        f"both show it: {figures}."
    )


def conclusion(runs: Sequence[RunCpu]) -> list[str]:
    """The bullets the report opens with."""
    lines: list[str] = []
    for op in ("put", "get"):
        by_mode = {run.mode: run for run in runs if run.op == op}
        if "async" in by_mode and "sync" in by_mode:
            lines.append("- " + _compare_modes(op.upper(), by_mode["async"], by_mode["sync"]))
    with_both = [run for run in runs if run.busy_share is not None and run.waiting_share is not None]
    short = [
        f"{run.run}: {run.clock_ticks or 0:,} clock ticks, {run.idle_samples:,} --idle samples"
        for run in with_both
        if (run.clock_ticks or 0) < MIN_CLOCK_TICKS or run.idle_samples < MIN_SAMPLES
    ]
    if short:
        lines.append(
            f"- No statement on how busy the coordinator was: too few samples ({'; '.join(short)}; "
            f"one needs {MIN_CLOCK_TICKS} clock ticks and {MIN_SAMPLES:,} samples per run)."
        )
    elif with_both:
        busy = [run.busy_share for run in with_both if run.busy_share is not None]
        waiting = [run.waiting_share for run in with_both if run.waiting_share is not None]
        ticks = [run.clock_ticks or 0 for run in with_both]
        counted = [run.idle_samples for run in with_both]
        figures = (
            f"/proc: busy {min(busy):.0%}-{max(busy):.0%} of the load window, {min(ticks):,}-{max(ticks):,} "
            f"clock ticks a run; --idle samples: waiting in {min(waiting):.0%}-{max(waiting):.0%} of "
            f"{min(counted):,}-{max(counted):,} a run"
        )
        if max(busy) < 0.5 and min(waiting) > 0.5:
            lines.append(f"- **The coordinator mostly waited** at this rate, in every run ({figures}).")
        elif min(busy) >= 0.5 and max(waiting) <= 0.5:
            lines.append(f"- **The coordinator was mostly busy** at this rate, in every run ({figures}).")
        else:
            lines.append(
                f"- No statement on how busy the coordinator was holds for both measures ({figures})."
            )
    measured = [run for run in runs if run.proc_us() is not None and run.samples is not None]
    enough = [run for run in measured if not run.cpu_shortfall]
    if enough:
        lines.append("- " + _samples_against_proc(enough))
    elif measured:
        lines.append(
            "- No statement on the samples against /proc: too few samples in every run (one needs "
            f"{_minimums()})."
        )
    return lines or ["- No run has both CPU figures from /proc and samples: nothing to conclude."]


def shortfalls(runs: Sequence[RunCpu]) -> list[str]:
    """The runs whose CPU figures are too few to state anything, with their counts: a report with any
    is a smoke check."""
    return [short for run in runs if (short := run.cpu_shortfall)]


def _minimums() -> str:
    return f"{MIN_CLOCK_TICKS} clock ticks of n1 CPU and {MIN_SAMPLES:,} samples in Python code"


def _samples_against_proc(runs: Sequence[RunCpu]) -> str:
    """What n1's cpu-profile samples are worth next to its CPU time: the run that strays furthest."""
    worst = max(runs, key=lambda run: _ratio(run.all_sampled_us, run.proc_us()) or 0.0)
    all_ratio = _ratio(worst.all_sampled_us, worst.proc_us()) or 0.0
    python_ratio = max(_ratio(run.sampled_us, run.proc_us()) or 0.0 for run in runs)
    said = ""
    if all_ratio > DIFFERENCE:
        loop_us = worst.samples_us(worst.samples.waiting_samples if worst.samples else 0)
        said = (
            f"**The cpu profile holds more samples than n1 had CPU**: in {worst.run}, they come to "
            f"{_us(worst.all_sampled_us)} per request against {_us(worst.proc_us())} of CPU by /proc "
            f"({all_ratio:.1f}x), {_us(loop_us)} of it in the loop's own frame: waiting, not CPU, so the "
            "tables rank only the samples in Python code. "
        )
    if python_ratio > DIFFERENCE:
        return said + (
            f"Even the samples in Python code come to up to {python_ratio:.1f}x the CPU /proc counted: a "
            "thread that is runnable but waits for one of the shared cores is sampled too. Read the frame "
            "tables as shares within a profile, not as CPU time."
        )
    return said + (
        "In every run the samples in Python code fit within n1's CPU time by /proc; the rest of that CPU "
        "is C code, the kernel and the loop's own work, which have no Python frame."
    )


def cpu_table(runs: Sequence[RunCpu]) -> list[str]:
    lines = [
        "| run | requests | n1 CPU/req (/proc) | n2 | n3 | all nodes | n1 samples | in Python "
        "| loop's own frame | no Python frame | n1 Python time/req (samples) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for run in runs:
        split = run.samples
        counts = ["-"] * 4
        if split is not None:
            numbers = (split.total, split.python_samples, split.waiting_samples, split.no_frame)
            counts = [f"{number:,}" for number in numbers]
        lines.append(
            "| "
            + " | ".join(
                [
                    run.run,
                    f"{run.requests:,}",
                    _us(run.proc_us()),
                    _us(run.proc_us("n2")),
                    _us(run.proc_us("n3")),
                    _us(run.cluster_us),
                    *counts,
                    _us(run.sampled_us),
                ]
            )
            + " |"
        )
    return [*lines, ""]


# One colour and hatch per bar segment, so no two look alike (in grey print too).
_PROC_BARS = (
    ("n1", "n1 (coordinator), /proc", "#1f4e79", ""),
    ("n2", "n2, /proc", "#5b9bd5", ".."),
    ("n3", "n3, /proc", "#bdd7ee", "xx"),
)
_SAMPLE_BARS = (
    ("n1 samples in Python code x interval", "#ed7d31", "//"),
    ("n1 other samples (the loop's own frame, none) x interval", "#d9d9d9", "\\\\"),
)


def plot_cpu(path: Path, runs: Sequence[RunCpu]) -> bool:
    """Per run, CPU per request by node (/proc, stacked) next to n1's cpu-profile samples x interval
    (in Python code, then the loop's own frame); False when no run has /proc figures."""
    shown = [run for run in runs if run.cpu_s]
    if not shown:
        return False
    figure, axes = plt.subplots(figsize=(max(6.0, 1.9 * len(shown) + 2), 4.8))
    width = 0.38
    for index, run in enumerate(shown):
        split = run.samples
        sampled = (
            [split.python_samples, split.waiting_samples + split.no_frame] if split is not None else [0, 0]
        )
        bars = [
            (index - width / 2, [run.proc_us(node) or 0.0 for node, *_ in _PROC_BARS], _PROC_BARS),
            (index + width / 2, [run.samples_us(count) or 0.0 for count in sampled], _SAMPLE_BARS),
        ]
        for x, values, styles in bars:
            bottom = 0.0
            for value, style in zip(values, styles, strict=True):
                label, color, hatch = style[-3:]
                axes.bar(x, value, width, bottom=bottom, color=color, hatch=hatch, edgecolor="black",
                         linewidth=0.6, label=label if index == 0 else None)  # fmt: skip
                bottom += value
            axes.annotate(f"{bottom:,.0f}", (x, bottom), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(range(len(shown)), [run.run for run in shown])
    axes.set_ylabel("µs per request")
    axes.set_title("Left: CPU per request by /proc. Right: n1's cpu-profile samples x interval")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} µs"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"
