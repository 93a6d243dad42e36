"""``python -m loadtest backup``: what a backup and a restore cost, measured on a local 3-node cluster
that serves a constant-rate load meanwhile.

1. Fill KEYS records of VALUE_SIZE bytes, then run the load for a few windows: the p99 before.
2. ``admin backup DIR`` while the load goes on: its time and counts, the p99 of each window it spans.
3. ``admin restore DIR`` into the same live cluster while the load goes on (every version is already
   there, so writing it again changes nothing): its time and outcomes, the p99 of each window it spans.
4. ``admin restore DIR`` into a fresh empty 3-node cluster (disaster recovery, no load): its time, and a
   sample of keys read back through it with ``ack=3``.

Writes ``backup.md`` (a table per window and a plot of p99 per window) and ``backup.json`` to ``--out``.
The clusters, the load generator, the admin command and this script share the machine's cores: the
report says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kvnode.config import NodeConfig
from kvnode.ops.local_cluster import start_local_cluster
from kvnode.ops.processes import NodeProcess
from loadtest.fill import fill
from loadtest.windows import WINDOW_S, Window, plot_p99, run_measurement, window, window_table, write_report
from loadtest.workload import Workload, key_name

__all__ = ["main"]

BEFORE_WINDOWS = 3
SAMPLE = 200  # keys read back from the recovered cluster
PHASES = ("before", "backup", "restore")


@dataclass
class Step:
    """One admin command: how long it took and its JSON summary."""

    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class BackupCost:
    keys: int
    value_size: int
    rate: float
    cores: int
    fill_s: float = 0.0
    windows: list[Window] = field(default_factory=list)
    backup: Step = field(default_factory=Step)
    live_restore: Step = field(default_factory=Step)
    recovery: Step = field(default_factory=Step)
    read_back: int = 0  # of SAMPLE keys, read back from the recovered cluster with their values


def _admin(url: str, *command: str) -> subprocess.Popen[bytes]:
    """``kvnode admin`` as an operator runs it, its JSON summary on stdout."""
    argv = [sys.executable, "-m", "kvnode", "admin", "--url", url, "--json", *command]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def _finished(process: subprocess.Popen[bytes], what: str) -> Step:
    """The command's own time (its summary's), not the time this script took to notice it ended."""
    out, _ = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{what} exited {process.returncode}")
    summary = json.loads(out)
    return Step(float(summary["seconds"]), summary)


def _under_load(
    cost: BackupCost, phase: str, url: str, command: tuple[str, ...], clock: float, say: Any
) -> Step:
    """Run an admin command while windows of load run, until it is done; the windows it spans as ``phase``."""
    process = _admin(url, *command)
    while process.poll() is None:
        at = time.monotonic() - clock
        p50, p99, achieved, errors = asyncio.run(window([url], cost.keys, cost.rate))
        cost.windows.append(Window(phase, at, p50, p99, achieved, errors))
        say(f"{phase}: p99 {p99:.2f} ms")
    step = _finished(process, " ".join(command))
    say(f"{phase} done in {step.seconds:.1f} s: {step.summary}")
    return step


def measure(keys: int, value_size: int, rate: float, say: Any) -> BackupCost:
    cost = BackupCost(keys, value_size, rate, os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="kvnode-backup-") as tmp:
        directory = Path(tmp) / "backup"
        cluster = start_local_cluster(NodeConfig(data_dir=Path(tmp) / "live"), 3, NodeProcess)
        try:
            say(f"filling {keys} records of {value_size} bytes")
            began = time.monotonic()
            _, failures = asyncio.run(fill(cluster.urls, Workload("put", keys, value_size)))
            cost.fill_s = time.monotonic() - began
            if failures:
                raise RuntimeError(f"fill failed: {dict(failures)}")
            clock = time.monotonic()
            for _ in range(BEFORE_WINDOWS):
                at = time.monotonic() - clock
                p50, p99, achieved, errors = asyncio.run(window(cluster.urls[:1], keys, rate))
                cost.windows.append(Window("before", at, p50, p99, achieved, errors))
                say(f"before: p99 {p99:.2f} ms")
            seed = cluster.urls[0]
            cost.backup = _under_load(cost, "backup", seed, ("backup", str(directory)), clock, say)
            cost.live_restore = _under_load(cost, "restore", seed, ("restore", str(directory)), clock, say)
        finally:
            cluster.stop()
        fresh = start_local_cluster(NodeConfig(data_dir=Path(tmp) / "recovered"), 3, NodeProcess)
        try:
            say("restoring into a fresh empty cluster")
            cost.recovery = _finished(_admin(fresh.urls[0], "restore", str(directory)), "restore")
            cost.read_back = _read_back(fresh.urls[0], keys)
            say(f"recovered in {cost.recovery.seconds:.1f} s; {cost.read_back} of {SAMPLE} sampled keys read")
        finally:
            fresh.stop()
    return cost


def _read_back(url: str, keys: int) -> int:
    """How many of SAMPLE filled keys read back (with a value) from every replica."""
    found = 0
    for index in random.Random(7).sample(range(keys), min(SAMPLE, keys)):
        key = key_name(index)
        try:
            with urllib.request.urlopen(f"{url}/v0/entity?id={key}&ack=3&from=3", timeout=10) as reply:
                found += reply.status == 200 and bool(reply.read())
        except OSError:
            pass
    return found


def report(cost: BackupCost, out: Path, command: str) -> Path:
    by_phase = {phase: [w for w in cost.windows if w.phase == phase] for phase in PHASES}

    def p99s(phase: str) -> str:
        return ", ".join(f"{w.p99_ms:.2f}" for w in by_phase[phase]) or "-"

    backed, live, recovered = cost.backup.summary, cost.live_restore.summary, cost.recovery.summary
    lines = [
        "# Backup and restore of a filled 3-node cluster under load",
        "",
        f"Command: `{command}`. One run on a {cost.cores}-core machine shared by the 3 nodes, the load "
        f"generator, the admin command and this script. Load: GET at {cost.rate:.0f}/s through the first "
        f"node, {WINDOW_S:.0f} s windows ({len(cost.windows)} windows: {len(by_phase['before'])} before, "
        f"{len(by_phase['backup'])} while the backup ran, {len(by_phase['restore'])} while the live "
        "restore ran).",
        "",
        f"- Filled {cost.keys} records of {cost.value_size} bytes in {cost.fill_s:.1f} s.",
        f"- **Backup: {cost.backup.seconds:.1f} s** for {backed.get('keys')} keys "
        f"({backed.get('bytes')} bytes).",
        f"- **Restore into the live cluster: {cost.live_restore.seconds:.1f} s** "
        f"({live.get('restored')} written, {live.get('kept_newer')} kept as newer or equal, "
        f"{live.get('skipped')} skipped, {live.get('failed')} failed).",
        f"- **Restore into a fresh empty cluster: {cost.recovery.seconds:.1f} s** "
        f"({recovered.get('restored')} written); {cost.read_back} of {min(SAMPLE, cost.keys)} sampled keys "
        "then read back with ack=3.",
        f"- p99 before: {p99s('before')} ms; during the backup: {p99s('backup')} ms; during the live "
        f"restore: {p99s('restore')} ms (one figure per window).",
        "",
        *window_table(cost.windows, "from the start"),
    ]
    return write_report(out, "backup", cost, lines, partial(_plot, cost))


def _plot(cost: BackupCost, path: Path) -> None:
    plot_p99(
        cost.windows,
        PHASES,
        "seconds from the first window's start (window start)",
        f"GET p99 at {cost.rate:.0f}/s while {cost.keys} records are backed up, then restored",
        path,
    )


def main(argv: list[str], command: str) -> int:
    return run_measurement("backup", __doc__, argv, command, measure, report)
