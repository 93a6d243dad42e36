"""The figures of the report's section at saturation (the ``saturation`` phase of the healthy runs,
profiling.record): per run, the throughput of wrk's closed loop, the coordinator's CPU per request by
/proc, the replica channel's batching by its /metrics (calls per frame, frames per request), and where
its on-CPU samples were, by function and by package (kvnode's packages, its layers, one by one; aiohttp;
the event loop); then what those samples let the report say, and how many it had.

Every on-CPU sample counts here, by the package of its innermost frame. At saturation the loop's own
frame (``Runner.run`` under uvloop) holds uvloop's C code and the system calls it makes, which have no
Python frame of their own; py-spy cannot tell them from a short wait for the next event, so the table
sets n1's busy share by /proc beside it. A share p of n samples is uncertain by about sqrt(p/n)
(profiling.cpu.uncertainty): a share is said to lead only by more than SIGMAS standard deviations of the
difference, and nothing is said of runs with fewer than MIN_CLOCK_TICKS clock ticks of n1 CPU or
MIN_SAMPLES samples.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiling.batching import Batching
from profiling.collapsed import (
    NO_PYTHON_FRAME,
    Stacks,
    frame_module,
    parse_collapsed,
    source_package,
    top_frames,
)
from profiling.cpu import (
    COORDINATOR,
    MIN_CLOCK_TICKS,
    SIGMAS,
    micros_label,
    ms_label,
    phase_record,
    share_label,
    uncertainty,
)
from profiling.pyspy import MIN_SAMPLES

__all__ = [
    "GROUPS",
    "PHASE",
    "SaturationRun",
    "group_of",
    "package_of_frame",
    "saturation_conclusion",
    "saturation_run",
    "saturation_table",
]

PHASE = "saturation"
KIND = f"{PHASE}-cpu"  # the artifact kind of its on-CPU samples
# The groups a sample's package falls in, as the table's columns name them.
GROUPS = ("kvnode", "aiohttp", "event loop", "other", NO_PYTHON_FRAME)
_GROUP_NAMES = {
    "kvnode": "kvnode's own frames",
    "aiohttp": "aiohttp (with multidict, yarl)",
    "event loop": "the event loop (asyncio, uvloop: its own frame and C code)",
    "other": "other code (the standard library, prometheus-client, ...)",
    NO_PYTHON_FRAME: "no Python frame",
}
_NAMED = 3  # kvnode packages and functions a conclusion names


def package_of_frame(frame: str) -> str:
    """The package a py-spy frame's code belongs to (profiling.collapsed.source_package).

    >>> package_of_frame("ClientChannel.send (kvnode/replica/channel/client.py:118)")
    'kvnode/replica'
    >>> package_of_frame("Runner.run (asyncio/runners.py:86)"), package_of_frame(NO_PYTHON_FRAME)
    ('asyncio', '[no Python frame]')
    """
    return frame if frame == NO_PYTHON_FRAME else source_package(frame_module(frame))


def group_of(package: str) -> str:
    """The group of GROUPS a package falls in.

    >>> [group_of(p) for p in ("kvnode/coordinator", "multidict/yarl", "uvloop", "builtins", NO_PYTHON_FRAME)]
    ['kvnode', 'aiohttp', 'event loop', 'other', '[no Python frame]']
    """
    if package.startswith("kvnode/"):
        return "kvnode"
    if package in ("aiohttp", "multidict/yarl"):
        return "aiohttp"
    if package in ("asyncio", "uvloop"):
        return "event loop"
    return package if package == NO_PYTHON_FRAME else "other"


@dataclass(frozen=True)
class SaturationRun:
    """One run's saturation phase: its load, n1's CPU and batching, and n1's on-CPU samples."""

    run: str
    scenario: str
    mode: str
    op: str
    load: dict[str, Any]  # wrk's figures (profiling.load.saturate)
    window_s: float
    cpu_s: float | None  # n1's CPU seconds over the load window, by /proc
    batching: Batching | None  # n1's, over the phase
    batching_at_rate: Batching | None  # n1's over the constant-rate phase, to set beside it
    rate: int  # the constant-rate phase's
    samples: Stacks  # n1's on-CPU samples, every one
    sample_rate: int  # py-spy's, a second
    flamegraph: Path | None  # of the samples in Python code

    @property
    def group(self) -> str:
        """What the modes are set side by side within, as profiling.cpu.RunCpu's."""
        return f"{self.scenario}, {self.op.upper()}"

    @property
    def requests(self) -> int:
        """Requests answered: n1's own count, else wrk's."""
        counted = self.batching.requests if self.batching is not None else self.load.get("requests")
        return int(counted or 0)

    @property
    def cpu_us(self) -> float | None:
        return self.cpu_s / self.requests * 1e6 if self.cpu_s is not None and self.requests else None

    @property
    def busy_share(self) -> float | None:
        return self.cpu_s / self.window_s if self.cpu_s is not None and self.window_s else None

    @property
    def clock_ticks(self) -> int:
        return round((self.cpu_s or 0.0) * os.sysconf("SC_CLK_TCK"))

    @property
    def total_samples(self) -> int:
        return sum(self.samples.values())

    @property
    def shortfall(self) -> str | None:
        """Why the samples are too few to say anything (None: they are enough)."""
        if self.clock_ticks >= MIN_CLOCK_TICKS and self.total_samples >= MIN_SAMPLES:
            return None
        return f"{self.run} at saturation: {self.clock_ticks:,} clock ticks, {self.total_samples:,} samples"

    def by_package(self) -> Counter[str]:
        """Samples by the package of their innermost frame."""
        found: Counter[str] = Counter()
        for stack, weight in self.samples.items():
            found[package_of_frame(stack[-1])] += weight
        return found

    def by_group(self) -> Counter[str]:
        found: Counter[str] = Counter()
        for package, weight in self.by_package().items():
            found[group_of(package)] += weight
        return found

    @property
    def sampled(self) -> str:
        """The samples as time next to n1's CPU time by /proc: more samples than CPU means a thread was
        sampled while it waited (for a core on a shared machine, or for the next event)."""
        seconds = self.total_samples / self.sample_rate if self.sample_rate else 0.0
        cpu = "-" if self.cpu_s is None else f"{self.cpu_s:.1f} s"
        return f"{seconds:.1f} s at {self.sample_rate} Hz, against {cpu} of CPU by /proc"

    def share(self, count: float) -> str:
        """``count`` of the samples as a share with its uncertainty (one standard deviation)."""
        total = self.total_samples
        share = count / total if total else 0.0
        return f"{share:.1%} ± {share * uncertainty(count):.1%}"


def saturation_run(run_dir: Path, manifest: dict[str, Any]) -> SaturationRun | None:
    """A run's saturation phase, or None if it had none."""
    phase = phase_record(manifest, PHASE)
    if not phase:
        return None
    artifacts = [a for a in phase.get("artifacts", []) if a["kind"] == KIND and a["node"] == COORDINATOR]
    raw = next((a for a in artifacts if a["format"] == "raw"), None)
    svg = next((a for a in artifacts if a["format"] == "svg"), None)
    at_rate = phase_record(manifest, "pyspy").get("batching")
    return SaturationRun(
        run=manifest["run"],
        scenario=manifest["spec"].get("scenario", "healthy"),
        mode=manifest["spec"]["mode"],
        op=manifest["spec"]["op"],
        load=phase.get("load", {}),
        window_s=float(phase.get("window_s") or 0.0),
        cpu_s=(phase.get("cpu_s") or {}).get(COORDINATOR),
        batching=Batching(**phase["batching"]) if phase.get("batching") else None,
        batching_at_rate=Batching(**at_rate) if at_rate else None,
        rate=int(manifest["spec"].get("rate") or 0),
        sample_rate=int(manifest.get("sample_rate_hz") or 0),
        samples=parse_collapsed((run_dir / raw["path"]).read_text()) if raw else Stacks(),
        flamegraph=run_dir / svg["path"] if svg else None,
    )


def _ratio(value: float | None, decimals: int) -> str:
    return "-" if value is None else f"{value:,.{decimals}f}"


def saturation_table(runs: Sequence[SaturationRun]) -> list[str]:
    """A row per run: the load, n1's CPU and batching, and its samples' shares by group."""
    groups = [group for group in GROUPS if any(run.by_group()[group] for run in runs)]
    lines = [
        "| run | req/s | p50 ms | p99 ms | n1 CPU/req (/proc) | n1 busy | calls/frame | frames/req "
        "| at the constant rate: calls/frame, frames/req | n1 samples | "
        + " | ".join(group.strip("[]") for group in groups)
        + " |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|" + "--:|" * len(groups),
    ]
    for run in runs:
        latency = run.load.get("latency_ms", {})
        sent, at_rate = run.batching, run.batching_at_rate
        by_group = run.by_group()
        cells = [
            run.run,
            f"{run.load.get('achieved_rate') or 0:,.0f}",
            ms_label(latency.get("p50")),
            ms_label(latency.get("p99")),
            micros_label(run.cpu_us),
            share_label(run.busy_share),
            _ratio(sent.calls_per_frame if sent else None, 1),
            _ratio(sent.frames_per_request if sent else None, 2),
            "-"
            if at_rate is None
            else f"{_ratio(at_rate.calls_per_frame, 1)}, {_ratio(at_rate.frames_per_request, 2)}",
            f"{run.total_samples:,}",
            *(run.share(by_group[group]) for group in groups),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _leader(counts: Counter[str], names: dict[str, str]) -> str:
    """Which of ``counts`` leads, said only beyond SIGMAS standard deviations of its lead over the next.

    >>> _leader(Counter(a=600, b=400), {"a": "A", "b": "B"})
    'A the largest part, ahead of B by more than 2 standard deviations'
    >>> _leader(Counter(a=510, b=490), {"a": "A", "b": "B"})
    'A and B not told apart (within 2 standard deviations of each other)'
    """
    ranked = counts.most_common(2)
    if len(ranked) < 2:
        return f"all of them {names.get(ranked[0][0], ranked[0][0])}" if ranked else "no samples"
    (first, first_count), (second, second_count) = ranked
    # Two counts of one sample set, each uncertain by about its square root.
    deviations = f"{SIGMAS:g} standard deviations"
    if first_count - second_count > SIGMAS * math.sqrt(first_count + second_count):
        return f"{names[first]} the largest part, ahead of {names[second]} by more than {deviations}"
    return f"{names[first]} and {names[second]} not told apart (within {deviations} of each other)"


def saturation_conclusion(runs: Sequence[SaturationRun]) -> list[str]:
    """A bullet per run: its figures, and where its samples were when they are enough to say."""
    lines = []
    for run in runs:
        latency = run.load.get("latency_ms", {})
        head = f"**{run.scenario}, {run.mode} {run.op.upper()} at saturation**"
        figures = (
            f"{run.load.get('achieved_rate') or 0:,.0f} requests/s over {run.load.get('connections', '?')} "
            f"connections (p50 {ms_label(latency.get('p50'))} ms, p99 {ms_label(latency.get('p99'))} ms); "
            f"n1 CPU {micros_label(run.cpu_us)} a request, busy {share_label(run.busy_share)} of the "
            f"{run.window_s:.0f} s window"
        )
        if run.batching is not None and run.batching.calls_per_frame is not None:
            figures += (
                f"; {run.batching.calls_per_frame:,.1f} calls a frame, "
                f"{_ratio(run.batching.frames_per_request, 2)} frames a request"
            )
            at_rate = run.batching_at_rate
            if at_rate is not None and at_rate.calls_per_frame is not None:
                figures += (
                    f" (at {run.rate:,}/s: {at_rate.calls_per_frame:,.1f} and "
                    f"{_ratio(at_rate.frames_per_request, 2)})"
                )
        if run.shortfall is not None:
            lines.append(
                f"- {head}, a smoke check: {figures}. No statement on where the time goes from "
                f"{run.clock_ticks:,} clock ticks of n1 CPU and {run.total_samples:,} samples "
                f"({run.sampled}; one needs {MIN_CLOCK_TICKS} and {MIN_SAMPLES:,})."
            )
            continue
        by_group = run.by_group()
        shares = ", ".join(
            f"{_GROUP_NAMES[group]} {run.share(count)}" for group, count in by_group.most_common() if count
        )
        own = Counter({p: n for p, n in run.by_package().items() if group_of(p) == "kvnode"})
        packages = ", ".join(f"`{package}` {run.share(count)}" for package, count in own.most_common(_NAMED))
        functions = ", ".join(
            f"`{row.frame}` {run.share(row.self_weight)}"
            for row in top_frames(run.samples, by="self", limit=_NAMED)
        )
        lines.append(
            f"- {head}: {figures}. Of n1's {run.total_samples:,} on-CPU samples ({run.sampled}; shares ± one "
            "standard deviation): "
            f"{shares}; {_leader(by_group, _GROUP_NAMES)}. kvnode's own frames by package: "
            f"{packages or 'none'}. First by self share: {functions}."
        )
    return lines
