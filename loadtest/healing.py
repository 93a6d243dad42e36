"""``python -m loadtest healing``: what healing costs, measured on a local 3-node cluster that serves a
constant-rate load while it heals.

1. Fill KEYS records of VALUE_SIZE bytes (from=3, the default), then run the load for a few windows:
   the p99 before.
2. Wipe one node's disk (stop it, remove its data dir, start it): it rebuilds from its peers while the
   load goes on; the p99 of each window, the rebuild's time, the records it received.
3. Check the rebuilt node alone: with its peers stopped, a sample of keys reads through it with ack=1.
4. The repair traffic of an idle healthy cluster: a fresh cluster with ``--repair-interval-s 1``, idle,
   its replica calls made for repair counted from /metrics, and the bytes they carry from the wire format.

Writes ``healing.md`` (a table per phase and a plot of p99 per window) and ``healing.json`` to ``--out``.
The cluster, the load generator and this script share the machine's cores: the report says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kvnode.config import NodeConfig
from kvnode.ops.local_cluster import LocalCluster, start_local_cluster
from kvnode.ops.processes import NodeProcess
from loadtest.fill import fill
from loadtest.windows import WINDOW_S, Window, plot_p99, run_measurement, window, write_report
from loadtest.workload import Workload

__all__ = ["main"]


BEFORE_WINDOWS = 3
REBUILD_DEADLINE_S = 300.0
IDLE_S = 10.0
SAMPLE = 1000


@dataclass
class HealingWindow(Window):
    """A window (phase: before, rebuilding, after; seconds since the wipe), with the wiped node's state."""

    rebuild: str = ""  # the wiped node's state and progress at the window's end


@dataclass
class Healing:
    keys: int
    value_size: int
    rate: float
    cores: int
    fill_s: float = 0.0
    windows: list[HealingWindow] = field(default_factory=list)
    rebuild_s: float = 0.0
    rebuilt_records: int = 0
    alone_sample: int = 0
    alone_found: int = 0
    idle: dict[str, Any] = field(default_factory=dict)


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/v0/stats", timeout=10) as reply:
        result: dict[str, Any] = json.loads(reply.read())
        return result


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def rebuild_state(url: str) -> tuple[str, int]:
    """The node's rebuild state (serving, rebuilding, unknown) and the records it received so far."""
    rebuild = _stats(url).get("rebuild", {})
    return str(rebuild.get("state", "serving")), int(rebuild.get("records_received", 0))


def measure(keys: int, value_size: int, rate: float, say: Any) -> Healing:
    healing = Healing(keys, value_size, rate, os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="kvnode-healing-") as tmp:
        cluster = start_local_cluster(NodeConfig(data_dir=Path(tmp)), 3, NodeProcess)
        try:
            _rebuild_phase(cluster, healing, say)
        finally:
            cluster.stop()
        say("idle cluster: repair traffic")
        idle = start_local_cluster(
            NodeConfig(data_dir=Path(tmp) / "idle", repair_interval_s=1), 3, NodeProcess
        )
        try:
            healing.idle = _idle_traffic(idle.urls)
        finally:
            idle.stop()
    return healing


def _rebuild_phase(cluster: LocalCluster[NodeProcess], healing: Healing, say: Any) -> None:
    urls = cluster.urls
    wiped = cluster.nodes[2]
    serving_urls = urls[:2]  # the load goes through the nodes that keep their disks
    say(f"filling {healing.keys} records of {healing.value_size} bytes")
    began = time.monotonic()
    _, failures = asyncio.run(fill(urls, Workload("put", healing.keys, healing.value_size)))
    healing.fill_s = time.monotonic() - began
    if failures:
        raise RuntimeError(f"fill failed: {dict(failures)}")
    for index in range(BEFORE_WINDOWS):
        p50, p99, achieved, errors = asyncio.run(window(serving_urls, healing.keys, healing.rate))
        healing.windows.append(
            HealingWindow("before", (index - BEFORE_WINDOWS) * WINDOW_S, p50, p99, achieved, errors, "-")
        )
        say(f"before: p99 {p99:.2f} ms")
    say(f"wiping {wiped.url}")
    wiped.stop()
    shutil.rmtree(wiped.config.data_dir)
    wipe = time.monotonic()
    wiped.start()
    while True:
        started = time.monotonic() - wipe
        p50, p99, achieved, errors = asyncio.run(window(serving_urls, healing.keys, healing.rate))
        state, received = rebuild_state(wiped.url)
        phase = "rebuilding" if state != "serving" or not healing.rebuild_s else "after"
        if state == "serving" and not healing.rebuild_s:
            healing.rebuild_s = _rebuild_seconds(wiped.url, time.monotonic() - wipe)
            healing.rebuilt_records = received
        healing.windows.append(
            HealingWindow(phase, started, p50, p99, achieved, errors, f"{state}, {received} received")
        )
        say(f"{phase}: p99 {p99:.2f} ms ({state}, {received} records received)")
        if phase == "after" or started > REBUILD_DEADLINE_S:
            break
    healing.alone_sample, healing.alone_found = _alone(cluster, healing.keys)


def _rebuild_seconds(url: str, bound: float) -> float:
    """The rebuild's own duration when the node reports it, else the time from the wipe to the window
    that saw it done (an upper bound)."""
    reported = _stats(url).get("rebuild", {}).get("seconds")
    return float(reported) if reported else bound


def _alone(cluster: LocalCluster[NodeProcess], keys: int) -> tuple[int, int]:
    """Stop the two other nodes and read a sample of keys through the rebuilt one with ack=1."""
    for node in cluster.nodes[:2]:
        node.stop()
    url = cluster.nodes[2].url
    found = 0
    for index in range(0, keys, max(1, keys // SAMPLE)):
        query = f"{url}/v0/entity?id=key-{index:08d}&ack=1"
        try:
            with urllib.request.urlopen(query, timeout=10) as reply:
                found += reply.status == 200
        except OSError:
            pass
    return len(range(0, keys, max(1, keys // SAMPLE))), found


def _idle_traffic(urls: list[str]) -> dict[str, Any]:
    """Repair calls an idle healthy cluster makes, per node and second, and the bytes they carry."""

    def repair_calls() -> float:
        total = 0.0
        for url in urls:
            for line in _metrics(url).splitlines():
                if line.startswith("kvnode_replica_calls_total{") and 'op="repair"' in line:
                    total += float(line.rsplit(" ", 1)[1])
        return total

    before = repair_calls()
    time.sleep(IDLE_S)  # the subject: an idle cluster's background traffic over this span
    calls = repair_calls() - before
    records = sum(
        _stats(url)["repair"]["records"]["sent"] + _stats(url)["repair"]["records"]["received"]
        for url in urls
    )
    own_url = max(len(url) for url in urls)
    # A BRANCHES call: 13-byte call header + the caller's URL; its reply: 9-byte header + 64 u64 hashes.
    call_bytes = 13 + own_url + 9 + 64 * 8
    return {
        "seconds": IDLE_S,
        "repair_calls_per_node_per_s": calls / len(urls) / IDLE_S,
        "bytes_per_call": call_bytes,
        "records_moved": records,
        "members": len(urls),
    }


def report(healing: Healing, out: Path, command: str) -> Path:
    before = [w for w in healing.windows if w.phase == "before"]
    during = [w for w in healing.windows if w.phase == "rebuilding"]
    idle = healing.idle
    lines = [
        "# Healing: a wiped node rebuilt under load, and an idle cluster's repair traffic",
        "",
        f"Command: `{command}`. One run on a {healing.cores}-core machine shared by the 3 nodes, the load "
        f"generator and this script. Load: GET at {healing.rate:.0f}/s through the two nodes that keep "
        f"their disks, {WINDOW_S:.0f} s windows ({len(healing.windows)} windows: {len(before)} before the "
        f"wipe, {len(during)} during the rebuild).",
        "",
        f"- Filled {healing.keys} records of {healing.value_size} bytes in {healing.fill_s:.1f} s.",
        f"- **Rebuild of the wiped node: {healing.rebuild_s:.1f} s**, {healing.rebuilt_records} records "
        "received.",
        f"- Then alone (its two peers stopped): {healing.alone_found} of {healing.alone_sample} sampled keys "
        "read through it with ack=1.",
        f"- p99 before: {', '.join(f'{w.p99_ms:.2f}' for w in before)} ms; during the rebuild: "
        f"{', '.join(f'{w.p99_ms:.2f}' for w in during) or '-'} ms (one figure per window).",
        f"- Idle healthy cluster (`--repair-interval-s 1`, {idle.get('seconds', 0):.0f} s): "
        f"{idle.get('repair_calls_per_node_per_s', 0):.2f} repair calls per node per second, each about "
        f"{idle.get('bytes_per_call', 0)} bytes with its reply, {idle.get('records_moved', 0)} records "
        "moved. With the default interval (3,600 s) a node makes one such exchange per peer per hour.",
        "",
        "| phase | from the wipe (s) | p50 (ms) | p99 (ms) | achieved (/s) | errors | the wiped node |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {w.phase} | {w.started_s:.0f} | {w.p50_ms:.2f} | {w.p99_ms:.2f} | {w.achieved:.0f} | {w.errors} "
        f"| {w.rebuild} |"
        for w in healing.windows
    ]
    return write_report(out, "healing", healing, lines, partial(_plot, healing))


def _plot(healing: Healing, path: Path) -> None:
    title = f"GET p99 at {healing.rate:.0f}/s while a wiped node rebuilds {healing.keys} records"
    plot_p99(
        healing.windows,
        ("before", "rebuilding", "after"),
        "seconds from the wipe (window start)",
        title,
        path,
    )


def main(argv: list[str], command: str) -> int:
    return run_measurement("healing", __doc__, argv, command, measure, report)
