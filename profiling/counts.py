"""``python -m profiling counts``: what one client request costs the coordinator, in counts that a busy
machine does not change much, for a before/after of a change to the request path.

Wall-clock figures need a quiet machine; these need only the same code and the same load. For each
operation, a fresh 3-node cluster (profiling.cluster) serves a bounded closed-loop load through n1, the
coordinator: ``requests`` requests over ``connections`` keep-alive connections, each sending its next
request as its answer arrives (profiling.closed_loop), after a warm-up on the same connections. Two phases:

    plain   perf stat counts n1's system calls by name over the load (in the kernel: the node runs at
            its own pace, which strace's stop at every call would not let it), and /metrics before and
            after gives the replica channel's frames: those n1 sent per request, its calls per frame,
            and the calls per frame its peers answered (kvnode.replica.outbox, .channel.answerers)
    memray  n1 restarted on the same data under memray (profiling.cluster.memray_argv): the allocations
            made between two /v0/stats calls around the load (profiling.memory), per request, and the
            functions that allocate most

and a third, on a node of one served in this process (no peer: the HTTP edge, the coordinator and its own
storage) under cProfile: Python calls per request, by package (profiling.python_calls).

How many calls a frame carries depends on the concurrency (each tick's calls leave in one frame), and so do
the counts per request: compare runs of the same ``connections``. n1's CPU per request (/proc) is printed
too, as a figure that does depend on the machine. Without perf (or the right to use it: root, or
``kernel.perf_event_paranoid`` at most 1) the system calls are left out and the table says why.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvnode.config import FanoutMode
from loadtest.workload import Workload
from profiling import memory
from profiling.batching import batching, delta, scrape
from profiling.children import Children
from profiling.closed_loop import warmed_loop
from profiling.cluster import ProfiledCluster, loop_lag
from profiling.load import LoadSpec, Op, fill
from profiling.python_calls import python_calls

__all__ = [
    "CountSpec",
    "Counts",
    "count_run",
    "find_perf",
    "format_counts",
    "parse_perf_stat",
    "perf_refusal",
]

Progress = Callable[[str], None]

_PERF_ATTACH_S = 1.0  # perf stat -p prints nothing once attached: the load starts this long after it
_TOP_FUNCTIONS = 12
_SYSCALL_EVENT = "syscalls:sys_enter_"


@dataclass(frozen=True)
class CountSpec:
    op: Op
    requests: int
    connections: int
    keys: int
    value_size: int
    mode: FanoutMode = "async"

    @property
    def workload(self) -> Workload:
        return Workload(self.op, self.keys, self.value_size)


@dataclass
class Counts:
    """One operation's counts per request at n1; ``None`` where a count was not taken."""

    op: Op
    requests: int
    statuses: dict[str, int]  # the measured loads' answers by status ("201": ...), every phase
    frames_sent: float = 0.0  # frames n1 sent to its peers, per request
    calls_per_frame_sent: float = 0.0
    calls_per_frame_answered: float = 0.0  # by n1's peers
    cpu_us: float = 0.0  # n1's CPU time per request (depends on the machine)
    syscalls: dict[str, float] | None = None  # per request, by name
    syscalls_missing: str = ""  # why there are none
    allocations: float | None = None  # per request
    allocated_bytes: float | None = None
    top_allocators: list[tuple[str, float]] = field(default_factory=list)  # (function, per request)
    python_calls: dict[str, float] | None = None  # per request at a node of one, by package


def parse_perf_stat(text: str) -> dict[str, int]:
    """System calls by name from ``perf stat -x, -e 'syscalls:sys_enter_*'`` output (one CSV line an
    event: count, unit, event, ...); events counted 0 or not counted are left out.

    >>> parse_perf_stat("# started on Tue\\n\\n12,,syscalls:sys_enter_read,1,100.00,,\\n"
    ...                 "0,,syscalls:sys_enter_iopl,1,100.00,,\\n"
    ...                 "<not counted>,,syscalls:sys_enter_x,0,0,,\\n")
    {'read': 12}
    """
    counts: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or not fields[2].startswith(_SYSCALL_EVENT) or not fields[0].isdigit():
            continue
        if int(fields[0]):
            counts[fields[2].removeprefix(_SYSCALL_EVENT)] = int(fields[0])
    return counts


def find_perf() -> str | None:
    return shutil.which("perf")


def perf_refusal(perf: str | None) -> str:
    """Why perf cannot count a process's system calls here; "" when it can."""
    if perf is None:
        return "perf is not installed (apt-get install linux-perf)"
    checked = subprocess.run(
        [perf, "stat", "-x,", "-e", f"{_SYSCALL_EVENT}getpid", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if checked.returncode != 0:
        reason = (checked.stderr.strip().splitlines() or ["failed"])[0]
        return (
            f"perf cannot count system calls here ({reason[:120]}): run as root, or set "
            "kernel.perf_event_paranoid to 1"
        )
    return ""


def _per(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def count_run(spec: CountSpec, out: Path, children: Children, progress: Progress, perf: str | None) -> Counts:
    """Both phases of one operation (logs and memray's capture under ``out``): its counts per request."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"{spec.mode} {spec.op.upper()}"
    with tempfile.TemporaryDirectory(prefix="kvnode-counts-") as data:
        plain = ProfiledCluster(spec.mode, Path(data), out / "logs")
        progress(f"{name}: starting a 3-node cluster")
        try:
            plain.start_and_wait()
            if spec.op == "get":
                progress(f"{name}: filling {spec.keys} keys of {spec.value_size} bytes")
                filled = LoadSpec(spec.op, 1, 1.0, spec.keys, spec.value_size)
                fill(plain.coordinator.url, filled, children, out / "logs" / "fill.log")
            progress(f"{name}: {spec.requests} requests, {spec.connections} at a time")
            counts = _plain_phase(spec, plain, out, children, perf)
        finally:
            plain.stop()
        capture = out / "memray.bin"
        traced = ProfiledCluster(spec.mode, Path(data), out / "logs", {"n1": capture})
        progress(f"{name}: n1 under memray, {spec.requests} requests")
        try:
            traced.start_and_wait(plain.ports)
            url = traced.coordinator.url
            with warmed_loop(url, spec.workload, spec.connections) as load:
                loop_lag(url)  # /v0/stats, memory.WINDOW_MARKER: the window starts
                statuses = load(spec.requests)
                loop_lag(url)  # and ends
        finally:
            traced.stop()
    for status, count in statuses.items():
        counts.statuses[status] = counts.statuses.get(status, 0) + count
    progress(f"{name}: reading the memray capture")
    allocations = memory.load_window_allocations(capture)
    counts.allocations = allocations.count / spec.requests
    counts.allocated_bytes = allocations.bytes / spec.requests
    top = memory.by_innermost_kvnode_frame(allocations.by_count).most_common(_TOP_FUNCTIONS)
    counts.top_allocators = [(function, count / spec.requests) for function, count in top]
    progress(f"{name}: a node of one in this process under cProfile, {spec.requests} requests")
    calls, statuses = python_calls(spec.workload, spec.requests, spec.connections, spec.mode)
    counts.python_calls = {package: number / spec.requests for package, number in calls.most_common()}
    for status, count in statuses.items():
        counts.statuses[status] = counts.statuses.get(status, 0) + count
    return counts


def _plain_phase(
    spec: CountSpec, cluster: ProfiledCluster, out: Path, children: Children, perf: str | None
) -> Counts:
    """System calls (perf) and frames (/metrics) per request over one load."""
    refusal = perf_refusal(perf)
    perf_out = out / "perf.csv"
    with warmed_loop(cluster.coordinator.url, spec.workload, spec.connections) as load:
        recorder = None
        if not refusal:
            assert perf is not None
            pid = str(cluster.coordinator.pid)
            events = f"{_SYSCALL_EVENT}*"
            argv = [perf, "stat", "-x,", "-e", events, "-p", pid, "-o", str(perf_out)]
            recorder = children.start(argv, log=out / "logs" / "perf.log")
            time.sleep(_PERF_ATTACH_S)
        before = [scrape(node.url) for node in cluster.nodes]
        cpu_before = cluster.cpu_seconds()["n1"]
        statuses = load(spec.requests)
        cpu_after = cluster.cpu_seconds()["n1"]
        after = [scrape(node.url) for node in cluster.nodes]
        if recorder is not None:
            children.stop(recorder, signal.SIGINT)
    requests = spec.requests
    sent = batching(before[0], after[0])
    peers = list(zip(before[1:], after[1:], strict=True))
    answered = [
        sum(delta(b, a, f"kvnode_replica_{what}_answered_total") for b, a in peers)
        for what in ("frames", "calls")
    ]
    counts = Counts(
        spec.op,
        requests,
        statuses,
        frames_sent=_per(sent.frames, requests),
        calls_per_frame_sent=_per(sent.calls, sent.frames),
        calls_per_frame_answered=_per(answered[1], answered[0]),
        cpu_us=(cpu_after - cpu_before) * 1e6 / requests,
    )
    if recorder is None:
        counts.syscalls_missing = refusal
    elif not perf_out.exists() or not (found := parse_perf_stat(perf_out.read_text())):
        counts.syscalls_missing = f"perf stat wrote no counts (log {out / 'logs' / 'perf.log'})"
    else:
        counts.syscalls = {call: number / requests for call, number in found.items()}
    return counts


def format_counts(runs: Sequence[Counts], spec: CountSpec, command: str) -> str:
    """The counts per request as a Markdown table, one column an operation, and the functions that
    allocate most.

    >>> run = Counts("put", 100, {"201": 200}, 0.5, 4.0, 4.0, 120.0, {"read": 1.2, "write": 1.5}, "",
    ...              800.0, 60000.0, [("put (kvnode/coordinator/coordinator.py)", 30.0)],
    ...              {"builtins": 60.0, "kvnode/node": 15.0})
    >>> table = format_counts([run], CountSpec("put", 100, 64, 1000, 256), "python -m profiling counts")
    >>> print(table)  # doctest: +ELLIPSIS
    Counts per request at n1, the coordinator: async fan-out, 100 requests a phase, 64 connections, ...
    <BLANKLINE>
    | per request | PUT |
    |---|--:|
    | allocations (memray) | 800 |
    | bytes allocated | 60,000 |
    | system calls (perf) | 2.70 |
    | &nbsp; write | 1.50 |
    | &nbsp; read | 1.20 |
    | frames sent to peers | 0.50 |
    | calls per frame sent | 4.0 |
    | calls per frame answered (the peers) | 4.0 |
    | CPU, µs (depends on the machine) | 120 |
    | Python calls at a node of one (cProfile) | 75 |
    | &nbsp; builtins | 60.0 |
    | &nbsp; kvnode/node | 15.0 |
    | answers | 201: 200 |
    <BLANKLINE>
    PUT: allocations per request by the innermost kvnode function (memray):
    <BLANKLINE>
            30.0  put (kvnode/coordinator/coordinator.py)
    """
    ops = [run.op.upper() for run in runs]
    lines = [
        f"Counts per request at n1, the coordinator: {spec.mode} fan-out, {spec.requests} requests a phase, "
        f"{spec.connections} connections, {spec.value_size}-byte values, {spec.keys} keys. By `{command}`.",
        "",
        f"| per request | {' | '.join(ops)} |",
        f"|---|{'--:|' * len(runs)}",
    ]

    def row(label: str, values: Sequence[str]) -> None:
        lines.append(f"| {label} | {' | '.join(values)} |")

    row("allocations (memray)", [_number(run.allocations, 0) for run in runs])
    row("bytes allocated", [_number(run.allocated_bytes, 0) for run in runs])
    row(
        "system calls (perf)",
        [_number(None if run.syscalls is None else sum(run.syscalls.values()), 2) for run in runs],
    )
    names = sorted(
        {call for run in runs for call, number in (run.syscalls or {}).items() if number >= 0.01},
        key=lambda call: -max((run.syscalls or {}).get(call, 0.0) for run in runs),
    )
    for call in names:
        row(f"&nbsp; {call}", [_number((run.syscalls or {}).get(call, 0.0), 2) for run in runs])
    row("frames sent to peers", [_number(run.frames_sent, 2) for run in runs])
    row("calls per frame sent", [_number(run.calls_per_frame_sent, 1) for run in runs])
    row("calls per frame answered (the peers)", [_number(run.calls_per_frame_answered, 1) for run in runs])
    row("CPU, µs (depends on the machine)", [_number(run.cpu_us, 0) for run in runs])
    calls = [run.python_calls or {} for run in runs]
    row(
        "Python calls at a node of one (cProfile)",
        [_number(sum(c.values()) if c else None, 0) for c in calls],
    )
    packages = sorted({package for c in calls for package, number in c.items() if number >= 0.5},
                      key=lambda package: -max(c.get(package, 0.0) for c in calls))  # fmt: skip
    for package in packages:
        row(f"&nbsp; {package}", [_number(c.get(package, 0.0), 1) for c in calls])
    row(
        "answers",
        [", ".join(f"{status}: {count}" for status, count in sorted(run.statuses.items())) for run in runs],
    )
    for run in runs:
        if run.syscalls_missing:
            lines += ["", f"{run.op.upper()}: no system calls counted: {run.syscalls_missing}"]
    for run in runs:
        lines += [
            "",
            f"{run.op.upper()}: allocations per request by the innermost kvnode function (memray):",
            "",
        ]
        lines += [f"    {count:8.1f}  {function}" for function, count in run.top_allocators]
    return "\n".join(lines)


def _number(value: float | None, decimals: int) -> str:
    return "-" if value is None else f"{value:,.{decimals}f}"
