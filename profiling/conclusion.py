"""The conclusion the profiling report opens with, from each run's figures (profiling.cpu): per scenario
and operation, the two modes' latency next to their coordinator CPU, a difference only where /proc and
the Python samples point the same way by at least DIFFERENCE and beyond SIGMAS standard deviations of the
samples, and where in the code (module, then function) the Python time per request differs beyond its
uncertainty; only from runs with enough clock ticks and samples. What falls short is said, not concluded.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

from profiling.collapsed import Stacks, frame_module
from profiling.cpu import (
    DIFFERENCE,
    MIN_CLOCK_TICKS,
    SIGMAS,
    RunCpu,
    micros_label,
    ms_label,
    ratio_label,
    uncertainty,
)
from profiling.pyspy import MIN_SAMPLES

__all__ = ["conclusion", "shortfalls", "where_it_differs"]

_WHERE_TOP = 3  # modules and functions named per comparison


def _ratio(first: float | None, second: float | None) -> float | None:
    return first / second if first is not None and second else None


def _latency(first: RunCpu, second: RunCpu) -> str:
    """The two runs' p50 and p99, as the conclusion sets them before the CPU."""
    said = []
    for key in ("p50", "p99"):
        values = [(run.latency_ms or {}).get(key) for run in (first, second)]
        if all(value is not None for value in values):
            said.append(f"{key} {ms_label(values[0])} vs {ms_label(values[1])} ms")
    return "latency " + ", ".join(said) if said else "no latency figures"


def _compare_modes(op: str, first: RunCpu, second: RunCpu) -> str:
    """One line comparing two modes' coordinator CPU per request, claiming only what both measures show."""
    proc = _ratio(first.proc_us(), second.proc_us())
    sampled = _ratio(first.sampled_us, second.sampled_us)
    by_proc = f"{micros_label(first.proc_us())} vs {micros_label(second.proc_us())}"
    by_samples = f"{first.sampled_label} vs {second.sampled_label}"
    sigma = math.hypot(uncertainty(first.python_samples), uncertainty(second.python_samples))
    figures = (
        f"{_latency(first, second)}; n1 CPU per request: /proc {by_proc} ({ratio_label(proc)}), "
        f"Python samples {by_samples} ({ratio_label(sampled)} ± {(sampled or 0) * sigma:.2f})"
    )
    allocations = [run.allocations_per_request for run in (first, second)]
    if allocations[0] is not None and allocations[1] is not None:
        figures += f"; allocations per request (memray) {allocations[0]:,.0f} vs {allocations[1]:,.0f}"
    if proc is None or sampled is None:
        missing = "CPU figures from /proc" if proc is None else "cpu-profile samples"
        return f"**{op}: no conclusion on {first.mode} vs {second.mode}**: no {missing} ({figures})."
    short = [run.cpu_shortfall for run in (first, second) if run.cpu_shortfall]
    if short:
        return (
            f"**{op}: {first.mode} and {second.mode} not compared: too few samples** ({'; '.join(short)}; "
            f"a comparison needs {_minimums()} per run); {_latency(first, second)}."
        )
    figures += (
        f"; from {first.clock_ticks:,} vs {second.clock_ticks:,} clock ticks and "
        f"{first.python_samples:,} vs {second.python_samples:,} samples in Python code"
    )
    beyond_noise = abs(math.log(sampled)) >= SIGMAS * sigma
    if beyond_noise and proc >= DIFFERENCE and sampled >= DIFFERENCE:
        more, less = first, second
    elif beyond_noise and proc <= 1 / DIFFERENCE and sampled <= 1 / DIFFERENCE:
        more, less = second, first
    else:
        return (
            f"**{op}: no difference between {first.mode} and {second.mode} that both measures show** "
            f"(a difference counts from {DIFFERENCE - 1:.0%} and beyond {SIGMAS:g} standard deviations "
            f"of the samples): {figures}."
        )
    return (
        f"**{op}: {more.mode} costs the coordinator more CPU per request than {less.mode}**; "
        f"both show it: {figures}."
    )


def _by(stacks: Stacks, key: Callable[[str], str]) -> Counter[str]:
    """Self samples by ``key`` of their innermost frame (its module, or the frame: its function)."""
    found: Counter[str] = Counter()
    for stack, weight in stacks.items():
        found[key(stack[-1])] += weight
    return found


def where_it_differs(first: RunCpu, second: RunCpu) -> list[str]:
    """Where in the code n1's Python time per request differs between two runs beyond SIGMAS standard
    deviations (a count k uncertain by sqrt(k)): the modules, then the functions, differing most."""
    if first.samples is None or second.samples is None or first.cpu_shortfall or second.cpu_shortfall:
        return []
    lines = []
    for what, key in (("module", frame_module), ("function", str)):
        counts = (_by(first.samples.python, key), _by(second.samples.python, key))
        found = []
        for name in set(counts[0]) | set(counts[1]):
            ours = first.samples_us(counts[0][name]) or 0.0
            theirs = second.samples_us(counts[1][name]) or 0.0
            spread = math.hypot(
                first.samples_us(math.sqrt(counts[0][name])) or 0.0,
                second.samples_us(math.sqrt(counts[1][name])) or 0.0,
            )
            if abs(ours - theirs) >= SIGMAS * spread:
                found.append((ours - theirs, spread, ours, theirs, name))
        found.sort(key=lambda row: -abs(row[0]))
        said = [
            f"`{name}` {difference:+,.0f} ± {spread:,.0f} µs ({ours:,.0f} vs {theirs:,.0f})"
            for difference, spread, ours, theirs, name in found[:_WHERE_TOP]
        ]
        lines.append(
            f"by {what}, {first.mode} minus {second.mode}, self time in Python code per request: "
            + ("; ".join(said) if said else f"none differs beyond {SIGMAS:g} standard deviations")
        )
    return lines


def _slow_replica(runs: Sequence[RunCpu]) -> list[str]:
    """What a slow replica changes for each mode and operation: its latency and n1's CPU per request."""
    lines = []
    for run in runs:
        if run.scenario != "slow-replica":
            continue
        healthy = next((h for h in runs if (h.scenario, h.mode, h.op) == ("healthy", run.mode, run.op)), None)
        if healthy is not None:
            lines.append(
                f"- **A slow replica, {run.mode} {run.op.upper()}**: {_latency(healthy, run)} (healthy vs "
                f"slow replica); n1 CPU per request by /proc {micros_label(healthy.proc_us())} vs "
                f"{micros_label(run.proc_us())}."
            )
    return lines


def conclusion(runs: Sequence[RunCpu]) -> list[str]:
    """The bullets the report opens with."""
    lines: list[str] = []
    groups = list(dict.fromkeys(run.group for run in runs))
    for group in groups:
        by_mode = {run.mode: run for run in runs if run.group == group}
        if "async" in by_mode and "sync" in by_mode:
            first, second = by_mode["async"], by_mode["sync"]
            lines.append("- " + _compare_modes(group, first, second))
            lines += [f"  - {line}" for line in where_it_differs(first, second)]
    lines += _slow_replica(runs)
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
