"""CPU per request from /proc next to py-spy's samples, as a table and a plot (profiling.conclusion draws
the conclusion the report opens with from them).

Two measures of the coordinator's work, each with its blind spot:

- ``/proc``: the node's user + system CPU time over the load window (record.py reads it before and
  after), divided by the requests answered. It counts everything the process ran (Python, C, kernel)
  and nothing it waited for, but not where.
- py-spy's on-CPU samples of the ``pyspy`` phase, split by their innermost frame (collapsed.split_samples): in
  Python code, in the event loop's own frame (its poll, or uvloop's C code, which has no frame of its
  own), or without a Python frame. A sample says where the thread was, not that it had a core. py-spy
  drops a thread the OS reports sleeping, yet the loop's own frame keeps far more samples than /proc
  has CPU time for, so they count as waiting, and a runnable thread waiting for one of the shared cores
  is sampled too.

The conclusion states only what both show: a difference between the modes goes in only when /proc and
the Python samples point the same way by at least ``DIFFERENCE``. And it states only what enough of
them show: a count of n samples is uncertain by about its square root (``uncertainty``), so a 10 %
difference between two counts needs about 1,000 on each side to stand out by two standard deviations
(``SIGMAS``). No statement rests on a run whose coordinator counted fewer than ``MIN_CLOCK_TICKS``
clock ticks of CPU (``/proc`` counts in ticks) or whose profile holds fewer than ``MIN_SAMPLES``
samples (of Python code, for CPU; all of them, for waiting); each statement gives the counts it rests
on, and a report whose runs fall short is a smoke check.
"""

from __future__ import annotations

import math
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
    "SIGMAS",
    "RunCpu",
    "cpu_table",
    "micros_label",
    "ms_label",
    "phase_record",
    "plot_cpu",
    "ratio_label",
    "run_cpu",
    "share_label",
    "uncertainty",
]

DIFFERENCE = 1.10  # a ratio between the modes below this is no difference
SIGMAS = 2.0  # nor is a difference within this many standard deviations of the counts it rests on
MIN_CLOCK_TICKS = 100  # of the coordinator's CPU by /proc, per run, for any statement on its CPU
COORDINATOR = "n1"
_DEFAULT_SAMPLE_RATE = 100  # run.json files written before it recorded py-spy's rate


def uncertainty(count: float) -> float:
    """The relative uncertainty of a count of independent samples, about sqrt(n)/n (1 with none).

    >>> uncertainty(1_000), uncertainty(0)
    (0.0316..., 1.0)
    """
    return 1 / math.sqrt(count) if count > 0 else 1.0


@dataclass(frozen=True)
class RunCpu:
    """One run's figures from its ``pyspy`` phase (n1 is the coordinator; every node has /proc)."""

    run: str
    mode: str
    op: str
    requests: int
    window_s: float
    cpu_s: dict[str, float]  # node -> CPU seconds over the load window; empty in older runs
    sample_rate: int
    samples: SampleSplit | None  # n1's on-CPU samples
    idle: SampleSplit | None  # n1's --idle samples (waiting threads included)
    scenario: str = "healthy"
    latency_ms: dict[str, float] | None = None  # the load's p50, p99... over the same phase
    gil: SampleSplit | None = None  # n1's --gil samples
    allocations_per_request: float | None = None  # n1's, counted by memray over its own phase

    @property
    def group(self) -> str:
        """What the modes are compared within: the scenario and the operation."""
        return f"{self.scenario}, {self.op.upper()}"

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

    def samples_us(self, samples: float) -> float | None:
        """``samples`` of n1's cpu profile as time per request: samples x interval / requests, in µs."""
        if self.samples is None or not self.requests:
            return None
        return samples / self.sample_rate / self.requests * 1e6

    @property
    def sampled_us(self) -> float | None:
        """n1's time in Python code per request by the samples: samples x interval / requests, in µs."""
        return self.samples_us(self.samples.python_samples if self.samples else 0)

    @property
    def sampled_label(self) -> str:
        """sampled_us and its uncertainty (one standard deviation), as the report writes them."""
        if self.sampled_us is None:
            return "-"
        return f"{self.sampled_us:,.0f} ± {self.sampled_us * uncertainty(self.python_samples):,.0f} µs"

    @property
    def gil_share(self) -> float | None:
        """The share of the load window some thread of n1 held the GIL, by the --gil samples."""
        if self.gil is None or not self.window_s:
            return None
        return self.gil.total / self.sample_rate / self.window_s

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


def phase_record(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    """A run's record of one phase (empty if it has none)."""
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
    cpu_phase = phase_record(manifest, "pyspy")
    return RunCpu(
        run=manifest["run"],
        mode=manifest["spec"]["mode"],
        op=manifest["spec"]["op"],
        requests=int(cpu_phase.get("load", {}).get("requests") or 0),
        window_s=float(cpu_phase.get("window_s") or 0.0),
        cpu_s=dict(cpu_phase.get("cpu_s") or {}),
        sample_rate=int(manifest.get("sample_rate_hz") or _DEFAULT_SAMPLE_RATE),
        samples=_split(run_dir, cpu_phase, "cpu"),
        idle=_split(run_dir, cpu_phase, "idle"),
        scenario=manifest["spec"].get("scenario", "healthy"),
        latency_ms=cpu_phase.get("load", {}).get("latency_ms"),
        gil=_split(run_dir, cpu_phase, "gil"),
        allocations_per_request=_allocations_per_request(phase_record(manifest, "memray")),
    )


def _allocations_per_request(phase: dict[str, Any]) -> float | None:
    requests = phase.get("load", {}).get("requests")
    counted = [
        artifact["total"]
        for artifact in phase.get("artifacts", [])
        if artifact["kind"] == "alloc-count"
        and artifact["node"] == COORDINATOR
        and artifact["format"] == "raw"
    ]
    return counted[0] / requests if counted and requests else None


def cpu_table(runs: Sequence[RunCpu]) -> list[str]:
    lines = [
        "| run | requests | p50 ms | p99 ms | n1 CPU/req (/proc) | n2 | n3 | all nodes | n1 samples "
        "| in Python | loop's own frame | no Python frame | n1 Python time/req (samples, ± √n) "
        "| n1 waiting (--idle) | n1 GIL held |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for run in runs:
        split = run.samples
        counts = ["-"] * 4
        if split is not None:
            numbers = (split.total, split.python_samples, split.waiting_samples, split.no_frame)
            counts = [f"{number:,}" for number in numbers]
        latency = run.latency_ms or {}
        lines.append(
            "| "
            + " | ".join(
                [
                    run.run,
                    f"{run.requests:,}",
                    *(ms_label(latency.get(key)) for key in ("p50", "p99")),
                    micros_label(run.proc_us()),
                    micros_label(run.proc_us("n2")),
                    micros_label(run.proc_us("n3")),
                    micros_label(run.cluster_us),
                    *counts,
                    run.sampled_label,
                    share_label(run.waiting_share),
                    share_label(run.gil_share),
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


def micros_label(value: float | None) -> str:
    """A CPU time per request as the report writes it."""
    return "-" if value is None else f"{value:,.0f} µs"


def ms_label(value: float | None) -> str:
    """A latency in ms as the report writes it: three figures, whole ms from 100 up.

    >>> ms_label(2.3456), ms_label(1638.2), ms_label(None)
    ('2.35', '1,638', '-')
    """
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def share_label(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def ratio_label(ratio: float | None) -> str:
    """A ratio between two modes as the report writes it."""
    return "-" if ratio is None else f"{ratio:.2f}x"
