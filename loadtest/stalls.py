"""``python -m loadtest stalls``: the worst event-loop lag of each node while it does each of the long jobs
a node does beside client requests, one at a time, on a filled local 3-node cluster under a light
constant-rate load (docs/overload.md).

The jobs: idle (the load alone), full listings (every node's ``/v0/entities`` read whole), the cluster
scan (``/v0/scan``, whole and in pages of the largest size), an ``admin repair`` of every node, deletes
of a quarter of the keys (LevelDB compacts behind them), and a 4th node's join (its streaming). Before a
job every node's loop-lag window starts afresh (``/v0/stats?reset=1``); after it, the window's worst lag
(the monitor sees one long callback as its length: kvnode.metrics.LoopLagMonitor) is the job's; and of
it, the longest spent running on the loop's own thread (its CPU time), which is a step of the node's, not
the process waiting for a core: on a shared machine the two differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from kvnode.node.scan_api import NEXT_PAGE_HEADER
from kvnode.ops.processes import NodeProcess
from loadtest.fill import fill
from loadtest.join import settled, three_and_a_newcomer
from loadtest.openloop import run_rate
from loadtest.workload import Workload, key_name

__all__ = ["main", "measure"]

_DEADLINE_S = 300.0  # a job not done by then ends the run


def _ask(url: str, path: str, method: str = "GET") -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url + path, method=method), timeout=60) as reply:
        return bytes(reply.read())


def _stats(url: str, reset: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(_ask(url, "/v0/stats" + ("?reset=1" if reset else "")))
    return result


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _DEADLINE_S
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not end within {_DEADLINE_S:.0f} s")
        time.sleep(0.1)


def _listings(urls: list[str]) -> None:
    for url in urls:
        _ask(url, "/v0/entities?start=0")


def _scans(urls: list[str]) -> None:
    _ask(urls[0], "/v0/scan?start=0")
    target: str | None = f"{urls[1]}/v0/scan?start=0&limit=10000"
    while target is not None:
        with urllib.request.urlopen(target, timeout=60) as reply:
            reply.read()
            page = reply.headers.get(NEXT_PAGE_HEADER)
        target = None if page is None else f"{urls[1]}/v0/scan?start=0&limit=10000&page={page}"


def _repair(urls: list[str]) -> None:
    for url in urls:
        _ask(url, "/v0/repair", "POST")
        _until(partial(_repaired, url), f"the repair of {url}")


def _repaired(url: str) -> bool:
    return bool(json.loads(_ask(url, "/v0/repair"))["done"])


def _deletes(urls: list[str], keys: int) -> None:
    doomed = [key_name(index) for index in range(0, keys, 4)]
    for index, key in enumerate(doomed):
        _ask(urls[index % len(urls)], f"/v0/entity?id={key}", "DELETE")


def _join(urls: list[str], newcomer: NodeProcess) -> None:
    newcomer.spawn()
    _until(partial(settled, urls, newcomer.url), "the join")


def _measured(urls: list[str], job: Callable[[], None], load: Workload, rate: float) -> dict[str, Any]:
    """The job run under the load; each node's worst lag in ms, the job's seconds."""
    for url in urls:
        _stats(url, reset=True)
    stop = threading.Event()
    loader = threading.Thread(target=_load, args=(urls, load, rate, stop), daemon=True)
    loader.start()
    began = time.monotonic()
    job()
    seconds = time.monotonic() - began
    stop.set()
    loader.join()
    lags = {url: _stats(url)["loop_lag_ms"] for url in urls}
    return {
        "seconds": round(seconds, 2),
        "worst_lag_ms": {url: lag["max"] for url, lag in lags.items()},
        "worst_ran_ms": {url: lag["ran_max"] for url, lag in lags.items()},
    }


def _load(urls: list[str], load: Workload, rate: float, stop: threading.Event) -> None:
    """A second of constant-rate load at a time, until stopped."""
    while not stop.is_set():
        asyncio.run(run_rate(urls, load, rate, 1.0, connections=8))


def measure(keys: int, rate: float, say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kvnode-stalls-") as tmp:
        cluster, newcomer = three_and_a_newcomer(Path(tmp))
        urls = list(cluster.urls)
        try:
            say(f"filling {keys} keys")
            _, failures = asyncio.run(fill(urls, Workload("put", keys)))
            if failures:
                raise RuntimeError(f"fill failed: {dict(failures)}")
            load = Workload("get", keys)
            jobs: dict[str, Callable[[], None]] = {
                "idle": lambda: time.sleep(2.0),
                "listings": lambda: _listings(urls),
                "scans": lambda: _scans(urls),
                "repair": lambda: _repair(urls),
                "deletes": lambda: _deletes(urls, keys),
                "join": lambda: _join(urls, newcomer),
            }
            for name, job in jobs.items():
                results[name] = _measured(urls, job, load, rate)
                say(f"{name}: {results[name]}")
        finally:
            newcomer.stop()
            cluster.stop()
    return results


def main(argv: list[str], command: str) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest stalls", description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--rate", type=float, default=200.0, help="GET per second while each job runs")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    print(f"command: {command}")
    results = measure(args.keys, args.rate, lambda line: print(line, flush=True))
    print(f"{'job':<10} {'seconds':>8}  worst loop lag per node, ms (of it, a step running on the loop)")
    for name, result in results.items():
        pairs = zip(result["worst_lag_ms"].values(), result["worst_ran_ms"].values(), strict=True)
        print(
            f"{name:<10} {result['seconds']:>8.1f}  "
            + "  ".join(f"{lag:7.1f} ({ran:6.1f})" for lag, ran in pairs)
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"command": command, "results": results}, indent=2) + "\n")
    return 0
