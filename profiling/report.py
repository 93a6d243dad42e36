"""report.md: a conclusion drawn from the runs, every run's latency and CPU per request from /proc next
to py-spy's samples, the load figures, then per scenario, operation and profile kind the top frames of
each mode side by side with their uncertainty (computed from the raw stacks), with links to every
flamegraph and dump; and the ``.gitignore`` that keeps the raw files out of a checked-in set."""

from __future__ import annotations

import fnmatch
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profiling.cluster import SLOW_REPLICA_DELAY_MS
from profiling.collapsed import (
    FrameShare,
    SampleSplit,
    Stacks,
    parse_collapsed,
    split_samples,
    top_frames,
    trunk,
)
from profiling.conclusion import conclusion, shortfalls
from profiling.cpu import (
    DIFFERENCE,
    MIN_CLOCK_TICKS,
    MIN_SAMPLES,
    SIGMAS,
    cpu_table,
    phase_record,
    plot_cpu,
    run_cpu,
    uncertainty,
)
from profiling.saturation import SaturationRun, saturation_conclusion, saturation_run, saturation_table

__all__ = ["GITIGNORE", "TOP", "kept_files", "load_runs", "write_report"]

TOP = 12
_MODE_ORDER = {"async": 0, "sync": 1}
_OP_ORDER = {"put": 0, "get": 1, "cas": 2}
_SCENARIO_ORDER = {"healthy": 0, "slow-replica": 1}

# (artifact kind, heading, what one unit of weight is, phase it comes from)
_SECTIONS = [
    ("cpu", "CPU: `py-spy record`, samples in Python code", "samples", "pyspy"),
    ("idle", "Waits: `py-spy record --idle` (every sample, waiting included)", "samples", "pyspy"),
    ("gil", "GIL: `py-spy record --gil`, Python samples of the thread holding the GIL", "samples", "pyspy"),
    ("alloc-count", "Allocations by count: memray, during the load", "allocations", "memray"),
    ("alloc-bytes", "Allocations by bytes: memray, during the load", "bytes", "memray"),
]
# The raw files a run keeps beside its summaries, to re-read but never to commit: a set stays small.
GITIGNORE = """# Raw captures and logs (python -m profiling): kept to re-read, never committed.
*.collapsed.txt
*.bin
*.log
logs/
"""
# How the saturation phase was made, a paragraph of the report (load: its wrk figures).
_SATURATION_HOW = """
Where throughput is decided. In each healthy run, between its constant-rate and memray phases and on the
same cluster, a closed loop from wrk (`wrk -t1 -c{connections}`, as `make bench --no-spread` loads the
coordinator) sends every request to n1 for {duration_s} s, each connection its next request as its
answer arrives, under one py-spy recorder on n1 (on-CPU samples). *req/s* and latency are wrk's; *n1
CPU/req* is n1's CPU time by /proc over the load window divided by the requests it answered (its
`kvnode_requests_total`); *calls/frame* and *frames/req* are the replica calls n1 sent its peers and the
frames they left in (`kvnode_peer_calls_sent_total`, `kvnode_peer_frames_sent_total`: a tick's calls
leave in one frame), from its /metrics before and after the phase, beside the same over the
constant-rate phase. The last columns split every on-CPU sample of n1 by the package of its innermost
frame (± one standard deviation): kvnode's own packages, aiohttp with multidict and yarl, and the event
loop, whose own frame (`Runner.run` under uvloop) holds uvloop's C code and its system calls, which have
no Python frame, and any short wait py-spy cannot tell from them: read it beside *n1 busy*, the share of
the window n1 had a core by /proc. Likewise a Python frame's self samples include the C code it calls (a
socket write, a LevelDB read).
"""
# Kinds whose tables rank only samples in Python code: a waiting sample there is not CPU work.
_SPLIT_KINDS = ("cpu", "gil")
CPU_PLOT = "cpu-per-request.png"


def kept_files(out: Path) -> list[Path]:
    """The files under ``out`` that GITIGNORE (``*.suffix`` and ``dir/`` lines) does not leave out: what
    a checked-in set holds."""
    patterns = [line for line in GITIGNORE.splitlines() if line and not line.startswith("#")]
    names = [pattern for pattern in patterns if not pattern.endswith("/")]
    folders = {pattern.rstrip("/") for pattern in patterns if pattern.endswith("/")}
    return sorted(
        path
        for path in out.rglob("*")
        if path.is_file()
        and not folders.intersection(path.relative_to(out).parts[:-1])
        and not any(fnmatch.fnmatch(path.name, name) for name in names)
    )


def load_runs(run_dirs: Sequence[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(directory, manifest) of each run that has a run.json, async before sync, PUT, GET, then CAS."""
    runs = [
        (path, json.loads((path / "run.json").read_text()))
        for path in run_dirs
        if (path / "run.json").exists()
    ]
    return sorted(runs, key=lambda run: _order(run[1]))


def _order(manifest: dict[str, Any]) -> tuple[int, int, int]:
    spec = manifest["spec"]
    scenario = _SCENARIO_ORDER.get(spec.get("scenario", "healthy"), 9)
    return scenario, _OP_ORDER.get(spec["op"], 9), _MODE_ORDER.get(spec["mode"], 9)


def write_report(out: Path, run_dirs: Sequence[Path], command: str) -> Path:
    """Write ``out/report.md`` (and its plot) for the runs in ``run_dirs``; its path."""
    runs = load_runs(run_dirs)
    cpu = [run_cpu(run_dir, manifest) for run_dir, manifest in runs]
    saturated = [found for run_dir, manifest in runs if (found := saturation_run(run_dir, manifest))]
    lines = [
        *_headline([*shortfalls(cpu), *(short for run in saturated if (short := run.shortfall))]),
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `{command}`",
        f"on {os.cpu_count()} CPU(s), Python {runs[0][1]['python'] if runs else '?'}.",
        "",
        "## Conclusion",
        "",
        "Drawn from the figures below, per scenario and operation, async next to sync. A statement about",
        "CPU is made only where the nodes' CPU time (/proc) and py-spy's samples agree, by at least",
        f"{DIFFERENCE - 1:.0%} and by more than {SIGMAS:g} standard deviations of the samples (a count n is",
        "uncertain by about √n, so a share p of n samples by about √(p/n)), and only from runs with at least",
        f"{MIN_CLOCK_TICKS} clock ticks of n1 CPU and {MIN_SAMPLES:,} samples in Python code. *Where in the",
        "code* names the modules and functions whose self time per request differs beyond that uncertainty.",
        "",
        *conclusion(cpu),
        "",
        *_saturation_section(saturated, out),
        "## Every run: latency, CPU per request, waits",
        "",
        "Latency is the load's over the `pyspy` phase (p50 and p99 of each phase are in the load table",
        "below). *n1 waiting* is the share of its `--idle` samples in the loop's own frame; *GIL held* the",
        "share of the load window some thread of n1 held the GIL (`--gil` samples x interval / window).",
        "",
        "CPU per request is each node's user + system CPU time over the `pyspy` phase's load window (from",
        "`/proc/PID/stat`) divided by the requests answered: everything the process ran, Python, C and",
        "kernel. n1's py-spy samples of the same phase are split by their innermost frame: *in Python*",
        "code (the CPU and GIL tables below rank only these), the *loop's own frame* (`Runner.run` under",
        "uvloop, `_run_once` or `select` under asyncio, or a threading wait: the loop's poll, or uvloop's",
        "C code, which has no frame of its own), and *no Python frame*. py-spy leaves out a thread the OS",
        "reports sleeping, yet where the loop's own frame holds more samples than /proc has CPU time for,",
        "they are waiting, not CPU. A sample says where a thread was, not that it had a core: on shared",
        "cores a thread waiting for one is sampled too. *Python time* is the samples in Python code times",
        "the sampling interval, per request.",
        "",
        *cpu_table(cpu),
    ]
    if plot_cpu(out / CPU_PLOT, cpu):
        lines += [f"![CPU per request by node, and n1's sampled Python time]({CPU_PLOT})", ""]
    lines += [
        "## How the runs were made",
        "",
        "Each run is one scenario, one fan-out mode and one operation on a fresh 3-node loopback cluster;",
        "the load goes to the coordinator n1. *healthy*: three nodes. *slow-replica*: n3 answers its peers",
        f"{SLOW_REPLICA_DELAY_MS} ms late, behind a delaying proxy (the load tests' slow-replica scenario);",
        "n1 has it among the replicas of every key."
        + (
            " A CAS op is a read, then a conditional write on the version it found (`loadtest rate --op"
            " cas`): its figures are per op, two requests, and it has no saturation phase (wrk's closed"
            " loop sends one kind of request)."
            if any(manifest["spec"]["op"] == "cas" for _, manifest in runs)
            else ""
        ),
        "A run is two load phases of the same rate: `pyspy`",
        "(three py-spy recorders side by side on n1: on-CPU, `--idle` and `--gil`; `py-spy dump` of every",
        "node halfway through) and a shorter `memray` (the cluster restarted on its data with n1 under",
        "`memray run`, which slows it down)"
        + (
            "; a healthy run has a third between them, `saturation` (*At saturation* above)."
            if saturated
            else "."
        )
        + " Shares are of the samples (or allocations, or bytes) a table ranks, ± √k/n for k of n;",
        "*self* counts a frame where it is innermost, *total* wherever it is on the stack (once per stack).",
        "Total tables leave out the trunk, the entry path every request runs under (runpy, main, down to",
        "the event loop's run). py-spy samples without stopping the node (`--nonblocking`), so a few",
        "stacks are torn and start mid-way; they count by their innermost frame like any other. Each",
        "flamegraph is 1,200 px wide; frames under 3 px are merged. The raw stacks, memray's capture",
        "(`memray flamegraph` draws it) and the logs stay beside the runs, left out of git by `.gitignore`.",
        "",
        *_load_table(runs, out),
    ]
    for group in dict.fromkeys(figures.group for figures in cpu):
        in_group = [run for run, figures in zip(runs, cpu, strict=True) if figures.group == group]
        lines += _group_section(group, in_group, out)
    lines += _dump_section(runs, out)
    (out / ".gitignore").write_text(GITIGNORE)
    path = out / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path


def _headline(short: Sequence[str]) -> list[str]:
    """The title; "smoke check" and the counts that fell short when a run is too small to compare."""
    if not short:
        return ["# kvnode profiles"]
    return [
        "# kvnode profiles: a smoke check, too few samples to compare the modes",
        "",
        f"Every profile was recorded, but {len(short)} phase(s) fell short of {MIN_CLOCK_TICKS} clock ticks "
        f"of n1 CPU or {MIN_SAMPLES:,} samples (in Python code, at the constant rate) ({'; '.join(short)}): "
        "the conclusions state nothing they would decide. Longer phases (`--duration`, "
        "`--saturation-duration`) or a higher rate collect more.",
    ]


def _saturation_section(runs: Sequence[SaturationRun], out: Path) -> list[str]:
    """At saturation: how it was loaded, a row per run, what the samples show, and per scenario and
    operation n1's samples by package and by function, the modes side by side."""
    if not runs:
        return []
    load = {"connections": "?", "duration_s": "?", **runs[0].load}
    lines = [
        "## At saturation",
        "",
        " ".join(_SATURATION_HOW.format(**load).split()),
        "",
        *saturation_table(runs),
        "### What the samples show",
        "",
        *saturation_conclusion(runs),
        "",
    ]
    for group in dict.fromkeys(run.group for run in runs):
        in_group = [run for run in runs if run.group == group]
        lines += [f"### {group} at saturation: n1 (coordinator), phase `saturation`", ""]
        for run in in_group:
            link = _link("flamegraph", run.flamegraph, out) if run.flamegraph else "no flamegraph"
            lines.append(f"- **{run.mode}**: {run.total_samples:,} on-CPU samples; {link} (its Python code)")
        lines.append("")
        by_package = [
            (
                run.mode,
                top_frames(
                    Counter({(package,): count for package, count in run.by_package().items()}), by="self"
                ),
            )
            for run in in_group
        ]
        lines += _side_by_side("self", by_package, "Samples by package, of every on-CPU sample:", "package")
        by_function = [(run.mode, top_frames(run.samples, by="self", limit=TOP)) for run in in_group]
        lines += _side_by_side("self", by_function, "Top functions by self share, of every on-CPU sample:")
    return lines


def _load_table(runs: list[tuple[Path, dict[str, Any]]], out: Path) -> list[str]:
    lines = [
        "## Load of each run",
        "",
        "Loop lag: how late n1's event loop ran a timer that was due, one long step seen as its length (from",
        "/v0/stats, reset as the phase's load started). Under memray the node is slower, so its phase's",
        "figures are not comparable.",
        "",
        "| run | phase | asked/s | succeeded/s | requests | errors | p50 ms | p99 ms | max ms | load run |"
        " n1 loop lag p50 / p99 / max ms | result |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|---|---|",
    ]
    for run_dir, manifest in runs:
        for phase in manifest["phases"]:
            load = phase.get("load", {})
            latency = load.get("latency_ms", {})
            lag = phase.get("loop_lag_ms", {}).get("n1", {})
            errors = load.get("errors") or {}
            lines.append(
                "| "
                + " | ".join(
                    [
                        manifest["run"],
                        phase["phase"],
                        _number(load.get("asked_rate")),
                        _number(load.get("achieved_rate")),
                        _number(load.get("requests")),
                        ", ".join(f"{status}: {count}" for status, count in errors.items()) or "0",
                        _number(latency.get("p50")),
                        _number(latency.get("p99")),
                        _number(latency.get("max")),
                        _load_verdict(load),
                        " / ".join(_number(lag.get(key)) for key in ("p50", "p99", "max")),
                        _link("json", run_dir / phase["load_json"], out),
                    ]
                )
                + " |"
            )
    return [*lines, ""]


def _group_section(group: str, runs: list[tuple[Path, dict[str, Any]]], out: Path) -> list[str]:
    lines = [f"## {group}", ""]
    nodes = sorted({artifact["node"] for _, manifest in runs for artifact in _artifacts(manifest)})
    for kind, heading, unit, phase in _SECTIONS:
        for node in nodes:
            columns = []  # (manifest, stacks, artifacts of this kind on this node, run dir)
            for run_dir, manifest in runs:
                artifacts = [a for a in _artifacts(manifest) if a["kind"] == kind and a["node"] == node]
                raw = next((a for a in artifacts if a["format"] == "raw"), None)
                stacks = parse_collapsed((run_dir / raw["path"]).read_text()) if raw else Stacks()
                columns.append((manifest, stacks, artifacts, run_dir))
            if not any(stacks for _, stacks, _, _ in columns):
                continue
            role = "coordinator" if node == "n1" else "replica"
            lines += [f"### {heading}, {node} ({role}), phase `{phase}`", ""]
            ranked = []  # (mode, the stacks the tables rank)
            for manifest, stacks, artifacts, run_dir in columns:
                mode = manifest["spec"]["mode"]
                links = [
                    _link("flamegraph", run_dir / a["path"], out) for a in artifacts if a["format"] == "svg"
                ]
                weight = sum(stacks.values())
                errors = next((a.get("errors") for a in artifacts if a.get("errors") is not None), None)
                error_note = f", {errors} sampling errors" if errors else ""
                if kind in _SPLIT_KINDS:
                    split = split_samples(stacks)
                    extra = _split_note(split)
                    ranked.append((mode, split.python))
                else:
                    extra = _memray_extra(kind, weight, manifest)
                    extra += _waiting_note(split_samples(stacks)) if kind == "idle" else ""
                    ranked.append((mode, stacks))
                lines.append(f"- **{mode}**: {weight:,} {unit}{error_note}{extra}; {' · '.join(links)}")
            lines.append("")
            lines += _side_by_side(
                "self", [(mode, top_frames(stacks, by="self", limit=TOP)) for mode, stacks in ranked]
            )
            lines += _side_by_side("total", [(mode, _top_total(stacks)) for mode, stacks in ranked])
    return lines


def _split_note(split: SampleSplit) -> str:
    return (
        f": {split.python_samples:,} in Python code (the tables rank these), {split.waiting_samples:,} "
        f"in the loop's own frame, {split.no_frame:,} without a Python frame"
    )


def _waiting_note(split: SampleSplit) -> str:
    share = split.waiting_samples / split.total if split.total else 0.0
    return f", {share:.0%} of them in the loop's own frame (waiting)"


def _top_total(stacks: Stacks) -> list[FrameShare]:
    common = set(trunk(stacks))
    return [row for row in top_frames(stacks, by="total") if row.frame not in common][:TOP]


def _memray_extra(kind: str, weight: int, manifest: dict[str, Any]) -> str:
    if not kind.startswith("alloc-"):
        return ""
    requests = phase_record(manifest, "memray").get("load", {}).get("requests") or 0
    windowed = all(a.get("windowed", True) for a in _artifacts(manifest) if a["kind"] == kind)
    per_request = f" ({weight / requests:,.0f} per request)" if requests else ""
    return per_request + ("" if windowed else " (load window not found: whole capture, start-up included)")


def _side_by_side(
    by: str, columns: list[tuple[str, list[FrameShare]]], heading: str = "", what: str = "frame"
) -> list[str]:
    """The modes' top rows side by side, each share ± its uncertainty; ``what`` the rows are."""
    header = "| # | " + " | ".join(f"{mode}: {what} | {by}" for mode, _ in columns) + " |"
    rule = "|---|" + "|".join("---|---:" for _ in columns) + "|"
    lines = [heading or f"Top frames by {by} share:", "", header, rule]
    for rank in range(max((len(rows) for _, rows in columns), default=0)):
        cells = []
        for _, rows in columns:
            if rank < len(rows):
                row = rows[rank]
                share = row.self_share if by == "self" else row.total_share
                weight = row.self_weight if by == "self" else row.total_weight
                spread = share * uncertainty(weight)
                cells += [f"`{_cell(row.frame)}`", f"{share:.1%} ± {spread:.1%}"]
            else:
                cells += ["", ""]
        lines.append(f"| {rank + 1} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _dump_section(runs: list[tuple[Path, dict[str, Any]]], out: Path) -> list[str]:
    lines = ["## py-spy dumps (phase `pyspy`, halfway through the load)", ""]
    for run_dir, manifest in runs:
        dumps = [a for a in _artifacts(manifest) if a["kind"] == "dump"]
        if dumps:
            links = [
                _link(a["node"] + ("" if a.get("ok") else " (failed)"), run_dir / a["path"], out)
                for a in dumps
            ]
            lines.append(f"- {manifest['run']}: {' · '.join(links)}")
    return [*lines, ""]


def _artifacts(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [artifact for phase in manifest["phases"] for artifact in phase.get("artifacts", [])]


def _load_verdict(load: dict[str, Any]) -> str:
    """VALID, or INVALID with loadtest.openloop's reasons (the generator set the pace, or over 1 % of the
    requests failed); runs written before the error rule have the generator's verdict alone, and older
    ones said "behind"."""
    verdict = load if "valid" in load else load.get("generator")
    if isinstance(verdict, dict):
        reasons = verdict.get("invalid_reasons", [])
        return "VALID" if verdict.get("valid") else "INVALID: " + "; ".join(reasons)
    return "behind" if load.get("generator_fell_behind") else "VALID"


def _link(text: str, path: Path, out: Path) -> str:
    return f"[{text}]({Path(os.path.relpath(path, out)).as_posix()})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def _number(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)
