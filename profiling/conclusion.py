"""The conclusion the profiling report opens with, from each run's CPU (profiling.cpu): a difference
between the modes only where /proc and the Python samples point the same way by at least DIFFERENCE, and
only from runs with enough clock ticks and samples; what falls short is said, not concluded.
"""

from __future__ import annotations

from collections.abc import Sequence

from profiling.cpu import DIFFERENCE, MIN_CLOCK_TICKS, RunCpu, micros_label, ratio_label
from profiling.pyspy import MIN_SAMPLES

__all__ = ["conclusion", "shortfalls"]


def _ratio(first: float | None, second: float | None) -> float | None:
    return first / second if first is not None and second else None


def _compare_modes(op: str, first: RunCpu, second: RunCpu) -> str:
    """One line comparing two modes' coordinator CPU per request, claiming only what both measures show."""
    proc = _ratio(first.proc_us(), second.proc_us())
    sampled = _ratio(first.sampled_us, second.sampled_us)
    by_proc = f"{micros_label(first.proc_us())} vs {micros_label(second.proc_us())}"
    by_samples = f"{micros_label(first.sampled_us)} vs {micros_label(second.sampled_us)}"
    figures = (
        f"/proc {by_proc} per request ({ratio_label(proc)}), "
        f"Python samples {by_samples} ({ratio_label(sampled)})"
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
            f"{micros_label(worst.all_sampled_us)} per request against "
            f"{micros_label(worst.proc_us())} of CPU by /proc ({all_ratio:.1f}x), "
            f"{micros_label(loop_us)} of it in the loop's own frame: waiting, not CPU, so the "
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
