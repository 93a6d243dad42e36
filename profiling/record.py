"""One profile run: a fan-out mode and an operation, under constant-rate load, every profile kind.

A run is a sequence of load phases, each the same constant-rate load for the same duration, because one
process cannot be sampled every way at once:

    cpu     plain cluster    py-spy record: flamegraph, speedscope and raw stacks; py-spy dump of every
                             node halfway through
    idle    plain cluster    py-spy record --idle: flamegraph and raw stacks
    gil     plain cluster    py-spy record --gil: flamegraph and raw stacks
    memray  memray cluster   the profiled node(s) started under memray run; HTML flamegraph and the
                             allocations made during the load as collapsed stacks

Every phase resets each node's event-loop lag window (/v0/stats?reset=1) as its load starts and reads
it when the load ends, and reads each node's CPU time from /proc before and after the load: the CPU
per request the report sets next to the sample counts. The memray cluster is a second cluster on the
plain cluster's data directories, so a GET run reads the keys filled once. Everything a run writes,
and which phase it came from, is listed in ``run.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvnode.config import FanoutMode
from profiling import memory, pyspy
from profiling.children import Children
from profiling.cluster import ProfiledCluster, ProfiledNode, loop_lag
from profiling.collapsed import format_collapsed
from profiling.load import LoadSpec, Op, fill, start_rate, wait_rate

__all__ = ["PHASES", "RunSpec", "record_run"]

Progress = Callable[[str], None]

PHASES: dict[str, list[tuple[pyspy.Kind, pyspy.Format]]] = {
    "cpu": [("cpu", "flamegraph"), ("cpu", "speedscope"), ("cpu", "raw")],
    "idle": [("idle", "flamegraph"), ("idle", "raw")],
    "gil": [("gil", "flamegraph"), ("gil", "raw")],
}


@dataclass(frozen=True)
class RunSpec:
    mode: FanoutMode
    op: Op
    rate: int
    duration: float
    keys: int
    value_size: int
    all_nodes: bool = False

    @property
    def name(self) -> str:
        return f"{self.mode}-{self.op}"

    @property
    def load(self) -> LoadSpec:
        return LoadSpec(self.op, self.rate, self.duration, self.keys, self.value_size)


def record_run(
    spec: RunSpec, out: Path, py_spy: str, children: Children, progress: Progress
) -> dict[str, Any]:
    """Record every phase of one run into ``out`` (created); the manifest, also written to run.json."""
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "run": spec.name,
        "spec": asdict(spec),
        "python": sys.version.split()[0],
        "sample_rate_hz": pyspy.SAMPLE_RATE,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "phases": [],
    }
    with tempfile.TemporaryDirectory(prefix="kvnode-profile-") as data:
        plain = ProfiledCluster(spec.mode, Path(data), out / "logs")
        progress(f"{spec.name}: starting a 3-node {spec.mode} cluster")
        try:
            plain.start_and_wait()
            manifest["nodes"] = [{"name": node.name, "url": node.url} for node in plain.nodes]
            targets = plain.nodes if spec.all_nodes else [plain.coordinator]
            if spec.op == "get":
                progress(f"{spec.name}: filling {spec.keys} keys of {spec.value_size} bytes")
                fill(plain.coordinator.url, spec.load, children, out / "logs" / "fill.log")
            for phase in PHASES:
                progress(f"{spec.name}: phase {phase}: {spec.rate}/s for {spec.duration:g} s")
                manifest["phases"].append(_pyspy_phase(phase, spec, plain, targets, out, py_spy, children))
        finally:
            plain.stop()
        ports = [node.config.port for node in plain.nodes]
        profiled = {node.name for node in targets}
        memray_outputs = {name: out / name / "memray.bin" for name in profiled}
        traced = ProfiledCluster(spec.mode, Path(data), out / "logs", memray_outputs)
        progress(f"{spec.name}: phase memray: restarting with {', '.join(sorted(profiled))} under memray")
        try:
            traced.start_and_wait(ports)  # the same URLs: the members stored them with their data
            phase_record = _load_phase("memray", spec, traced, out, children, lambda: None)
        finally:
            traced.stop()
        progress(f"{spec.name}: phase memray: reading the captures")
        phase_record["artifacts"] = [
            artifact
            for node in traced.select(profiled)
            for artifact in _memray_artifacts(spec, node, out, children)
        ]
        manifest["phases"].append(phase_record)
    manifest["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (out / "run.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _pyspy_phase(
    phase: str,
    spec: RunSpec,
    cluster: ProfiledCluster,
    targets: list[ProfiledNode],
    out: Path,
    py_spy: str,
    children: Children,
) -> dict[str, Any]:
    pids = cluster.pids_by_name()
    recorders = [
        (node, pyspy.Recorder(kind, fmt, out / node.name / f"{kind}.{pyspy.SUFFIXES[fmt]}"))
        for node in targets
        for kind, fmt in PHASES[phase]
    ]
    for node, recorder in recorders:
        recorder.start(py_spy, pids[node.name], children)
    dumps: list[dict[str, Any]] = []

    def during_load() -> None:
        if phase == "cpu":
            _dump_midway(spec, cluster, out, py_spy, dumps)

    try:
        record = _load_phase(phase, spec, cluster, out, children, during_load)
    finally:
        for _node, recorder in recorders:
            recorder.stop(children)
    record["artifacts"] = [
        {
            "node": node.name,
            "kind": recorder.kind,
            "format": recorder.format,
            "path": recorder.output.relative_to(out).as_posix(),
            "samples": recorder.samples,
            "errors": recorder.errors,
        }
        for node, recorder in recorders
        if recorder.output.exists()
    ] + dumps
    return record


def _dump_midway(
    spec: RunSpec, cluster: ProfiledCluster, out: Path, py_spy: str, dumps: list[dict[str, Any]]
) -> None:
    """Halfway through the load, ``py-spy dump`` every node (the look a person takes at a stuck node)."""
    time.sleep(spec.duration / 2)
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
    during_load: Callable[[], None],
) -> dict[str, Any]:
    """Reset loop lag, run the load (``during_load`` runs beside it), read loop lag and each node's CPU
    time over the load window (from /proc): the phase record."""
    for node in cluster.nodes:
        loop_lag(node.url, reset=True)
    result_path = out / f"load-{phase}.json"
    log = out / "logs" / f"load-{phase}.log"
    started = time.time()
    cpu_before = cluster.cpu_seconds()
    process = start_rate(cluster.coordinator.url, spec.load, result_path, children, log)
    beside = threading.Thread(target=during_load, name=f"{phase}-beside-load", daemon=True)
    beside.start()
    try:
        load = wait_rate(process, spec.load, result_path, children, log)
    finally:
        beside.join(timeout=60.0)
    cpu_after = cluster.cpu_seconds()
    ended = time.time()
    lag = {node.name: loop_lag(node.url) for node in cluster.nodes}
    return {
        "phase": phase,
        "cluster": "memray" if phase == "memray" else "plain",
        "load": load,
        "load_json": result_path.relative_to(out).as_posix(),
        "window_s": round(ended - started, 3),
        "cpu_s": {name: round(cpu_after[name] - cpu_before[name], 3) for name in cpu_before},
        "loop_lag_ms": lag,
    }


def _memray_artifacts(
    spec: RunSpec, node: ProfiledNode, out: Path, children: Children
) -> list[dict[str, Any]]:
    capture = node.memray_output
    if capture is None or not capture.exists():
        print(f"profiling: {node.name} left no memray capture", file=sys.stderr)
        return []
    artifacts: list[dict[str, Any]] = [
        {
            "node": node.name,
            "kind": "memray",
            "format": "capture",
            "path": capture.relative_to(out).as_posix(),
        }
    ]
    renders = {
        flavour: memory.render_flamegraph(
            capture, out / node.name / f"memray-{flavour}.html", children, temporary=temporary
        )
        for flavour, temporary in (("temporary", True), ("peak", False))
    }
    allocations = memory.load_window_allocations(capture)  # while memray renders beside it
    for flavour, render in renders.items():
        if render.wait(children):
            artifacts.append(
                {
                    "node": node.name,
                    "kind": "memray",
                    "format": f"html-{flavour}",
                    "path": render.output.relative_to(out).as_posix(),
                }
            )
    for unit, stacks in (("count", allocations.by_count), ("bytes", allocations.by_bytes)):
        path = out / node.name / f"alloc-{unit}.collapsed.txt"
        path.write_text(format_collapsed(stacks))
        artifacts.append(
            {
                "node": node.name,
                "kind": f"alloc-{unit}",
                "format": "raw",
                "path": path.relative_to(out).as_posix(),
                "total": allocations.count if unit == "count" else allocations.bytes,
                "windowed": allocations.windowed,
            }
        )
    return artifacts
