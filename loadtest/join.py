"""``python -m loadtest join``: what a join costs, measured on a local 3-node cluster that serves a
constant-rate load while a 4th node joins it.

1. Fill KEYS records of VALUE_SIZE bytes (from=3, the default: every member holds every key), then run
   the load for a few windows: the p99 before.
2. Start a 4th node with ``--join``: it joins, streams what it will own (with from = every member: every
   record), and settles as a member, while the load goes on through the three first nodes; the p99 of
   each window, the time from its start to every member running with it settled, the records streamed.

Writes ``join.md`` (a table per window and a plot of p99 per window) and ``join.json`` to ``--out``. The
cluster, the load generator and this script share the machine's cores: the report says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
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
from loadtest.windows import WINDOW_S, Window, plot_p99, run_measurement, window, window_table, write_report
from loadtest.workload import Workload

__all__ = ["main", "settled", "three_and_a_newcomer"]

BEFORE_WINDOWS = 3
AFTER_WINDOWS = 2
JOIN_DEADLINE_S = 300.0


@dataclass
class Join:
    keys: int
    value_size: int
    rate: float
    cores: int
    fill_s: float = 0.0
    windows: list[Window] = field(default_factory=list)  # before, joining, after; since its start
    join_s: float = 0.0  # from the 4th node's start to every member running with it settled
    streamed: int = 0


def _get(url: str, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + path, timeout=10) as reply:
        result: dict[str, Any] = json.loads(reply.read())
        return result


def settled(urls: list[str], newcomer: str) -> bool:
    """Whether every member runs with the newcomer as a member like the others."""
    try:
        views = [_get(url, "/v0/status") for url in [*urls, newcomer]]
    except OSError:
        return False
    return all(newcomer in view["cluster"] and not view["joining"] for view in views)


def _watch(urls: list[str], newcomer: str, started: float, join: Join, done: threading.Event) -> None:
    """Poll until the join settled; record when."""
    while not done.is_set() and time.monotonic() - started < JOIN_DEADLINE_S:
        if settled(urls, newcomer):
            join.join_s = time.monotonic() - started
            join.streamed = int(_get(newcomer, "/v0/cluster")["streamed"])
            done.set()
            return
        time.sleep(0.1)


def three_and_a_newcomer(tmp: Path) -> tuple[LocalCluster[NodeProcess], NodeProcess]:
    """A local 3-node cluster in ``tmp``, started, and a 4th node, not yet started, that joins it on the
    port kept free for it."""
    spare: list[int] = []

    def keep_spare(index: int, config: NodeConfig, ports: list[int]) -> NodeConfig:
        spare[:] = ports
        return config

    cluster = start_local_cluster(
        NodeConfig(data_dir=tmp), 3, NodeProcess, spare_ports=1, configure=keep_spare
    )
    newcomer = NodeProcess(NodeConfig(port=spare[0], data_dir=tmp / "newcomer", join=cluster.urls[0]))
    return cluster, newcomer


def measure(keys: int, value_size: int, rate: float, say: Any) -> Join:
    join = Join(keys, value_size, rate, os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="kvnode-join-") as tmp:
        cluster, newcomer = three_and_a_newcomer(Path(tmp))
        try:
            _run(cluster.urls, newcomer, join, say)
        finally:
            newcomer.stop()
            cluster.stop()
    return join


def _run(urls: list[str], newcomer: NodeProcess, join: Join, say: Any) -> None:
    say(f"filling {join.keys} records of {join.value_size} bytes")
    began = time.monotonic()
    _, failures = asyncio.run(fill(urls, Workload("put", join.keys, join.value_size)))
    join.fill_s = time.monotonic() - began
    if failures:
        raise RuntimeError(f"fill failed: {dict(failures)}")
    for index in range(BEFORE_WINDOWS):
        p50, p99, achieved, errors = asyncio.run(window(urls, join.keys, join.rate))
        join.windows.append(Window("before", (index - BEFORE_WINDOWS) * WINDOW_S, p50, p99, achieved, errors))
        say(f"before: p99 {p99:.2f} ms")
    say(f"starting {newcomer.url} with --join {urls[0]}")
    done = threading.Event()
    started = time.monotonic()
    newcomer.spawn()
    watcher = threading.Thread(target=_watch, args=(urls, newcomer.url, started, join, done), daemon=True)
    watcher.start()
    after = 0
    while after < AFTER_WINDOWS and time.monotonic() - started < JOIN_DEADLINE_S:
        window_start = time.monotonic() - started
        settled_before = done.is_set()
        p50, p99, achieved, errors = asyncio.run(window(urls, join.keys, join.rate))
        phase = "after" if settled_before else "joining"
        after += phase == "after"
        join.windows.append(Window(phase, window_start, p50, p99, achieved, errors))
        say(f"{phase}: p99 {p99:.2f} ms" + (f" (joined in {join.join_s:.1f} s)" if done.is_set() else ""))
    done.set()
    watcher.join(5)


def report(join: Join, out: Path, command: str) -> Path:
    before = [w for w in join.windows if w.phase == "before"]
    during = [w for w in join.windows if w.phase == "joining"]
    lines = [
        "# A 4th node joining a filled 3-node cluster under load",
        "",
        f"Command: `{command}`. One run on a {join.cores}-core machine shared by the 4 nodes, the load "
        f"generator and this script. Load: GET at {join.rate:.0f}/s through the three first nodes, "
        f"{WINDOW_S:.0f} s windows ({len(join.windows)} windows: {len(before)} before the join, "
        f"{len(during)} while it ran).",
        "",
        f"- Filled {join.keys} records of {join.value_size} bytes in {join.fill_s:.1f} s.",
        f"- **Joined in {join.join_s:.1f} s** (from its start to every member running with it settled), "
        f"{join.streamed} records streamed to it.",
        f"- p99 before: {', '.join(f'{w.p99_ms:.2f}' for w in before)} ms; while it joined: "
        f"{', '.join(f'{w.p99_ms:.2f}' for w in during) or '-'} ms (one figure per window).",
        "",
        *window_table(join.windows, "from its start"),
    ]
    return write_report(out, "join", join, lines, partial(_plot, join))


def _plot(join: Join, path: Path) -> None:
    title = f"GET p99 at {join.rate:.0f}/s while a 4th node joins {join.keys} records"
    plot_p99(
        join.windows,
        ("before", "joining", "after"),
        "seconds from the 4th node's start (window start)",
        title,
        path,
    )


def main(argv: list[str], command: str) -> int:
    return run_measurement("join", __doc__, argv, command, measure, report)
