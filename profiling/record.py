"""One profile run: a scenario, a fan-out mode and an operation, under constant-rate load, every
profile kind, and in the healthy scenario a closed loop at saturation.

A run is two load phases of the same rate, and a third with as many requests as the node answers:

    pyspy       plain cluster   three py-spy recorders side by side on the profiled node(s): on-CPU
                                samples (cpu), every sample, waiting ones too (--idle), and the samples of
                                the thread holding the GIL (--gil); raw stacks, drawn as flamegraph SVGs;
                                py-spy dump of every node halfway through
    saturation  plain cluster   (when the spec asks for one) a closed loop of ``connections`` connections
                                from wrk (profiling.load.saturate), with one py-spy recorder (cpu) on the
                                profiled node(s): where the time goes when throughput is decided
    memray      memray cluster  the profiled node(s) started under memray run; the allocations made during
                                the load as raw stacks, by count and by bytes, drawn as flamegraph SVGs

The recorders are ``--nonblocking`` (profiling.pyspy): they read the node without stopping it, so three
of them sample the same load without taking turns, and one phase serves all three views. At saturation
one recorder samples, so that the profiler takes as little of the shared cores from the node as it can.
The memray phase is shorter: a request allocates hundreds of times, so a few seconds hold millions of
allocations.

Every phase resets each node's event-loop lag window (/v0/stats?reset=1) as its load starts and reads
it when the load ends, reads each node's CPU time from /proc before and after the load (the CPU per
request the report sets next to the sample counts), and the coordinator's /metrics before and after
(profiling.batching: requests answered, replica frames and calls sent). The memray cluster is a second
cluster on the plain cluster's data directories and ports, so a GET run reads the keys filled once.
Everything a run writes, and which phase it came from, is listed in ``run.json``; what is raw (stacks,
the memray capture, logs, wrk's script and output) is left out of git by the ``.gitignore`` the compare
writes (profiling.report).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvnode.config import FanoutMode
from loadtest.workload import Workload
from profiling import memory, pyspy
from profiling.batching import batching, scrape
from profiling.children import Children
from profiling.cluster import ProfiledCluster, ProfiledNode, Scenario, loop_lag
from profiling.collapsed import Stacks, format_collapsed, parse_collapsed, split_samples
from profiling.flamegraph import render_svg
from profiling.load import LoadSpec, Op, fill, saturate, start_rate, wait_rate

__all__ = ["RunSpec", "record_run"]

Progress = Callable[[str], None]
# Start and stop the recorders: around the load, inside the window its CPU time is read over.
Sampling = tuple[Callable[[], None], Callable[[], None]]
_NO_SAMPLING: Sampling = (lambda: None, lambda: None)

# What each py-spy recorder samples, as a flamegraph's title says it.
_VIEWS: dict[pyspy.Kind, str] = {
    "cpu": "CPU (py-spy, on-CPU samples)",
    "idle": "Waiting and running (py-spy --idle, every sample)",
    "gil": "GIL held (py-spy --gil, samples of the thread holding it)",
}


@dataclass(frozen=True)
class RunSpec:
    mode: FanoutMode
    op: Op
    rate: int
    duration: float
    memray_duration: float
    keys: int
    value_size: int
    scenario: Scenario = "healthy"
    sample_rate: int = pyspy.SAMPLE_RATE
    all_nodes: bool = False
    saturation_duration: int = 0  # seconds of the saturation phase; 0: none
    connections: int = 64  # the saturation phase's closed loop

    @property
    def name(self) -> str:
        return f"{self.scenario}-{self.mode}-{self.op}"

    @property
    def title(self) -> str:
        return f"{self.scenario}, {self.mode} {self.op.upper()} at {self.rate:,}/s"

    @property
    def saturation_title(self) -> str:
        return (
            f"{self.scenario}, {self.mode} {self.op.upper()} at saturation ({self.connections} connections)"
        )

    @property
    def workload(self) -> Workload:
        return Workload(self.op, self.keys, self.value_size)

    def load(self, phase: str) -> LoadSpec:
        duration = self.memray_duration if phase == "memray" else self.duration
        return LoadSpec(self.op, self.rate, duration, self.keys, self.value_size)


def record_run(
    spec: RunSpec, out: Path, py_spy: str, children: Children, progress: Progress, wrk: str | None = None
) -> dict[str, Any]:
    """Record every phase of one run into ``out`` (created); the manifest, also written to run.json.
    ``wrk`` is the load of the saturation phase, which a spec with a saturation_duration needs."""
    if spec.saturation_duration and wrk is None:
        raise ValueError(f"{spec.name}: a saturation phase needs wrk")
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "run": spec.name,
        "spec": asdict(spec),
        "python": sys.version.split()[0],
        "sample_rate_hz": spec.sample_rate,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "phases": [],
    }
    with tempfile.TemporaryDirectory(prefix="kvnode-profile-") as data:
        plain = ProfiledCluster(spec.mode, Path(data), out / "logs", scenario=spec.scenario)
        progress(f"{spec.name}: starting a 3-node {spec.mode} cluster ({spec.scenario})")
        try:
            plain.start_and_wait()
            manifest["nodes"] = [{"name": node.name, "url": node.url} for node in plain.nodes]
            targets = plain.nodes if spec.all_nodes else [plain.coordinator]
            if spec.op == "get":
                progress(f"{spec.name}: filling {spec.keys} keys of {spec.value_size} bytes")
                fill(plain.coordinator.url, spec.load("pyspy"), children, out / "logs" / "fill.log")
            progress(f"{spec.name}: phase pyspy: {spec.rate}/s for {spec.duration:g} s, cpu, idle and gil")
            sampled = _Sampled(spec, plain, targets, out, py_spy, children)
            manifest["phases"].append(_pyspy_phase(sampled))
            if wrk is not None and spec.saturation_duration:
                progress(f"{spec.name}: phase saturation: a closed loop of {spec.connections} connections "
                         f"for {spec.saturation_duration} s, cpu")  # fmt: skip
                manifest["phases"].append(_saturation_phase(sampled, wrk))
        finally:
            plain.stop()
        profiled = {node.name for node in targets}
        memray_outputs = {name: out / name / "memray.bin" for name in profiled}
        traced = ProfiledCluster(spec.mode, Path(data), out / "logs", memray_outputs, spec.scenario)
        progress(f"{spec.name}: phase memray: {', '.join(sorted(profiled))} under memray, "
                 f"{spec.memray_duration:g} s")  # fmt: skip
        try:
            traced.start_and_wait(plain.ports)  # the same URLs: the members stored them with their data
            phase_record = _load_phase("memray", spec, traced, out, children, lambda halt: None)
        finally:
            traced.stop()
        progress(f"{spec.name}: phase memray: reading the captures")
        phase_record["artifacts"] = [
            artifact for node in traced.select(profiled) for artifact in _memray_artifacts(spec, node, out)
        ]
        manifest["phases"].append(phase_record)
    manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (out / "run.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


@dataclass(frozen=True)
class _Sampled:
    """What a sampled phase works on: the run, its cluster, the nodes it samples, where it writes, and
    the tools it starts."""

    spec: RunSpec
    cluster: ProfiledCluster
    targets: list[ProfiledNode]
    out: Path
    py_spy: str
    children: Children


def _pyspy_phase(run: _Sampled) -> dict[str, Any]:
    """The constant-rate load under three recorders, and a dump of every node halfway."""
    dumps: list[dict[str, Any]] = []

    def load(sampling: Sampling) -> dict[str, Any]:
        def dump_midway(halt: threading.Event) -> None:
            _dump_midway(run.spec, run.cluster, run.out, run.py_spy, dumps, halt)

        return _load_phase("pyspy", run.spec, run.cluster, run.out, run.children, dump_midway, sampling)

    record = _sampled_phase(run, "pyspy", tuple(_VIEWS), load)
    record["artifacts"] += dumps
    return record


def _saturation_phase(run: _Sampled, wrk: str) -> dict[str, Any]:
    """wrk's closed loop on the coordinator under one recorder (cpu)."""
    spec, out = run.spec, run.out
    result_path = out / "load-saturation.json"

    def load(sampling: Sampling) -> dict[str, Any]:
        with _measured("saturation", run.cluster, sampling) as record:
            url = run.cluster.coordinator.url
            figures = saturate(
                wrk, url, spec.workload, spec.connections, spec.saturation_duration, out / "logs"
            )
        result_path.write_text(json.dumps(figures, indent=2) + "\n")
        return {**record, "load": figures, "load_json": result_path.relative_to(out).as_posix()}

    return _sampled_phase(run, "saturation", ("cpu",), load)


def _sampled_phase(
    run: _Sampled, phase: str, kinds: Sequence[pyspy.Kind], load: Callable[[Sampling], dict[str, Any]]
) -> dict[str, Any]:
    """``load`` (the phase's record) with a recorder of each of ``kinds`` on each target, sampling as it
    says; the raw stacks and their flamegraphs as the record's artifacts, named for the phase (the
    pyspy phase's plainly: cpu, idle, gil; another's with its name first)."""
    spec, out, children = run.spec, run.out, run.children
    targets = run.targets
    prefix = "" if phase == "pyspy" else f"{phase}-"
    title = spec.title if phase == "pyspy" else spec.saturation_title
    recorders = [
        (node, pyspy.Recorder(kind, out / node.name / f"{prefix}{kind}.collapsed.txt", spec.sample_rate))
        for node in targets
        for kind in kinds
    ]
    pids = {node.name: node.pid for node in targets}

    def start() -> None:
        for node, recorder in recorders:
            recorder.start(run.py_spy, pids[node.name], children)

    def stop() -> None:
        for _node, recorder in recorders:
            recorder.stop(children)

    try:
        record = load((start, stop))
    finally:
        stop()
    artifacts: list[dict[str, Any]] = []
    for node, recorder in recorders:
        if not recorder.output.exists():
            continue
        stacks = parse_collapsed(recorder.output.read_text())
        split = split_samples(stacks)
        counts = f"{split.total:,} samples at {spec.sample_rate} Hz, {split.python_samples:,} in Python code"
        # The loop's own frame would take most of the width: CPU and GIL graphs draw the Python code.
        drawn = stacks if recorder.kind == "idle" else split.python
        counts += ", all drawn" if recorder.kind == "idle" else ", those drawn"
        svg = _flamegraph(
            drawn,
            out / node.name / f"{prefix}{recorder.kind}.svg",
            f"{_VIEWS[recorder.kind]}: {_who(node)}, {title}",
            "samples",
            counts,
            split.python_samples,
        )
        for path, fmt in ((recorder.output, "raw"), (svg, "svg")):
            artifacts.append(
                {
                    "node": node.name,
                    "kind": f"{prefix}{recorder.kind}",
                    "format": fmt,
                    "path": path.relative_to(out).as_posix(),
                    "samples": recorder.samples,
                    "errors": recorder.errors,
                }
            )
    record["artifacts"] = artifacts
    return record


def _who(node: ProfiledNode) -> str:
    return f"{node.name} ({'coordinator' if node.name == 'n1' else 'replica'})"


def _flamegraph(stacks: Stacks, path: Path, title: str, unit: str, counts: str, counted: int) -> Path:
    """Draw ``stacks`` into ``path``; under MIN_SAMPLES ``counted`` (samples in Python code) the page
    says it is a smoke check."""
    note = ""
    if unit == "samples" and counted < pyspy.MIN_SAMPLES:
        note = (
            f"Smoke check: {counted:,} samples in Python code (under {pyspy.MIN_SAMPLES:,}): "
            "shares uncertain by more than a tenth of themselves"
        )
    path.write_text(render_svg(stacks, title, unit, counts, note))
    return path


def _dump_midway(
    spec: RunSpec,
    cluster: ProfiledCluster,
    out: Path,
    py_spy: str,
    dumps: list[dict[str, Any]],
    halt: threading.Event,
) -> None:
    """Halfway through the load, ``py-spy dump`` every node (the look a person takes at a stuck node);
    nothing if the load is halted first."""
    if halt.wait(spec.duration / 2):
        return
    for node in cluster.nodes:
        path = out / node.name / "dump.txt"
        ok = pyspy.dump(py_spy, cluster.pids_by_name()[node.name], path)
        dumps.append(
            {
                "node": node.name,
                "kind": "dump",
                "format": "text",
                "path": path.relative_to(out).as_posix(),
                "ok": ok,
            }
        )


def _load_phase(
    phase: str,
    spec: RunSpec,
    cluster: ProfiledCluster,
    out: Path,
    children: Children,
    during_load: Callable[[threading.Event], None],
    sampling: Sampling = _NO_SAMPLING,
) -> dict[str, Any]:
    """The constant-rate load, measured (``_measured``); ``during_load`` runs beside it, and its event
    halts it if the load is interrupted: the phase record."""
    result_path = out / f"load-{phase}.json"
    log = out / "logs" / f"load-{phase}.log"
    with _measured(phase, cluster, sampling) as record:
        process = start_rate(cluster.coordinator.url, spec.load(phase), result_path, children, log)
        halt = threading.Event()
        beside = threading.Thread(target=during_load, args=(halt,), name=f"{phase}-beside-load", daemon=True)
        beside.start()
        try:
            load = wait_rate(process, spec.load(phase), result_path, children, log)
        except BaseException:
            halt.set()  # Ctrl-C or a failed load: what runs beside it stops at once, not after its sleep
            raise
        finally:
            beside.join(timeout=60.0)
    return {**record, "load": load, "load_json": result_path.relative_to(out).as_posix()}


@contextlib.contextmanager
def _measured(phase: str, cluster: ProfiledCluster, sampling: Sampling) -> Iterator[dict[str, Any]]:
    """Around a load: read the coordinator's /metrics, reset loop lag, start sampling, read each node's
    CPU time (/proc); after it, the same in reverse. The record it yields is filled once the load
    is done: the window, the CPU over it, the loop lag and the coordinator's batching. The profiler's own
    /v0/stats and /metrics calls are outside the sampling and the CPU window."""
    start_sampling, stop_sampling = sampling
    metrics_before = scrape(cluster.coordinator.url)  # first: rendering it is no part of the lag window
    for node in cluster.nodes:
        loop_lag(node.url, reset=True)
    start_sampling()
    started = time.time()
    cpu_before = cluster.cpu_seconds()
    record: dict[str, Any] = {"phase": phase, "cluster": "memray" if phase == "memray" else "plain"}
    yield record
    cpu_after = cluster.cpu_seconds()
    ended = time.time()
    stop_sampling()
    lag = {node.name: loop_lag(node.url) for node in cluster.nodes}
    record.update(
        window_s=round(ended - started, 3),
        cpu_s={name: round(cpu_after[name] - cpu_before[name], 3) for name in cpu_before},
        loop_lag_ms=lag,
        batching=asdict(batching(metrics_before, scrape(cluster.coordinator.url))),
    )


def _memray_artifacts(spec: RunSpec, node: ProfiledNode, out: Path) -> list[dict[str, Any]]:
    """The allocations made during the load, as raw stacks and flamegraphs by count and by bytes."""
    capture = node.memray_output
    if capture is None or not capture.exists():
        print(f"profiling: {node.name} left no memray capture", file=sys.stderr)
        return []
    allocations = memory.load_window_allocations(capture)
    kept = capture.relative_to(out).as_posix()
    artifacts: list[dict[str, Any]] = [
        {"node": node.name, "kind": "memray", "format": "capture", "path": kept}
    ]
    for unit, stacks in (("count", allocations.by_count), ("bytes", allocations.by_bytes)):
        what = "allocations" if unit == "count" else "bytes allocated"
        total = sum(stacks.values())
        title = f"Allocations by {unit} (memray, in the load): {_who(node)}, {spec.title}"
        raw = out / node.name / f"alloc-{unit}.collapsed.txt"
        raw.write_text(format_collapsed(stacks))
        counts = f"{total:,} {what} over {spec.memray_duration:g} s"
        svg = _flamegraph(stacks, out / node.name / f"alloc-{unit}.svg", title, what, counts, total)
        for path, fmt in ((raw, "raw"), (svg, "svg")):
            artifacts.append(
                {
                    "node": node.name,
                    "kind": f"alloc-{unit}",
                    "format": fmt,
                    "path": path.relative_to(out).as_posix(),
                    "total": total,
                    "windowed": allocations.windowed,
                }
            )
    return artifacts
