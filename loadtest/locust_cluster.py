"""Locust on a fresh, filled local 3-node cluster: its web UI, or a bounded headless run with reports.

- ``python -m loadtest ui``: Locust's web UI on 127.0.0.1, the host filled in and the default workload
  (read-mostly) selected; Ctrl-C stops Locust and every node, by PID, and exits 0.
- ``python -m loadtest locust --out DIR``: the default workload, headless, for ``--duration`` seconds;
  DIR gets Locust's own report (``locust.html``, ``locust_*.csv``) and ``summary.md``, ours.
"""

from __future__ import annotations

import contextlib
import csv
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvnode.config import FanoutMode
from kvnode.ops.processes import stop_processes
from loadtest import interruptible
from loadtest.fill import fill
from loadtest.scenarios import ScenarioCluster, start_scenario
from loadtest.workload import Workload

__all__ = ["HeadlessSettings", "run_headless", "run_ui", "write_summary"]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
CSV_PREFIX = "locust"  # Locust writes locust_stats.csv, locust_stats_history.csv, locust_failures.csv, ...
_GRACE = 60.0  # seconds Locust may take past its run time (start-up, stopping users, writing reports)


class FillError(RuntimeError):
    """The cluster could not be filled."""


@contextlib.contextmanager
def filled_cluster(keys: int, mode: FanoutMode) -> Iterator[ScenarioCluster]:
    """A fresh healthy 3-node cluster on free loopback ports with keys 0..keys-1 written; stopped after."""
    with tempfile.TemporaryDirectory(prefix="kvnode-locust-") as data:
        cluster = start_scenario("healthy", mode, Path(data))
        try:
            _, failures = interruptible.run(fill(cluster.load_urls, Workload("put", keys)))
            if failures:
                raise FillError(f"the fill failed: {dict(failures)}")
            yield cluster
        finally:
            cluster.stop()


def _locust_on_filled_cluster(
    command: str,
    keys: int,
    mode: FanoutMode,
    options: Sequence[str],
    timeout: float | None,
    announce: str = "",
    interrupted: int = 130,
) -> int:
    """A filled cluster, Locust with ``options`` against its first node, then both stopped by PID.

    Locust's exit status; 1 when the fill failed or Locust ran past ``timeout`` s, ``interrupted`` on
    Ctrl-C."""
    try:
        with filled_cluster(keys, mode) as cluster:
            argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", cluster.load_urls[0]]
            locust = subprocess.Popen([*argv, "--kv-keys", str(keys), *options])
            print(f"cluster ({mode} fan-out): {', '.join(cluster.load_urls)}, {keys} keys filled", flush=True)
            if announce:
                print(announce, flush=True)
            try:
                return locust.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"loadtest {command}: Locust ran past {timeout:g} s and was stopped", file=sys.stderr)
                return 1
            finally:
                stop_processes([locust])
    except FillError as error:
        print(f"loadtest {command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return interrupted


def run_ui(web_port: int, keys: int, mode: FanoutMode) -> int:
    web = ["--web-host", "127.0.0.1", "--web-port", str(web_port), "--users", "10", "--spawn-rate", "10"]
    # Not imported from the locustfile: importing locust monkey-patches this process with gevent.
    announce = (
        f"Locust UI: http://127.0.0.1:{web_port} (Ctrl-C stops Locust and the cluster)\n"
        'Workload: read-mostly; to pick another, open "Custom parameters" in the form (Locust keeps a '
        "locustfile's own options there, folded)"
    )
    # Ctrl-C is how the UI is meant to be stopped: exit 0, so `make loadtest-ui` does not report an error.
    return _locust_on_filled_cluster("ui", keys, mode, web, None, announce, interrupted=0)


@dataclass(frozen=True)
class HeadlessSettings:
    out: Path
    duration: float = 30.0
    users: int = 20
    keys: int = 10_000
    mode: FanoutMode = "async"


def run_headless(settings: HeadlessSettings, command: str) -> int:
    """Run the default workload headless for ``settings.duration`` s; Locust's exit status (1 when any
    request failed), after writing its report and our summary.md into ``settings.out``."""
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{CSV_PREFIX}_stats.csv").unlink(missing_ok=True)  # a summary only of this run's figures
    options = ["--headless", "--users", str(settings.users), "--spawn-rate", str(settings.users)]
    options += ["--run-time", f"{settings.duration:g}s", "--html", str(out / "locust.html")]
    options += ["--csv", str(out / CSV_PREFIX)]
    status = _locust_on_filled_cluster(
        "locust", settings.keys, settings.mode, options, settings.duration + _GRACE
    )
    if status == 130 or not (out / f"{CSV_PREFIX}_stats.csv").exists():
        return status
    summary = write_summary(settings, command, status)
    print(f"report: {summary} (Locust's own: {out / 'locust.html'})", flush=True)
    return status


def _ms(value: str) -> str:
    return f"{float(value):,.0f}" if value not in ("", "N/A") else "-"


def write_summary(settings: HeadlessSettings, command: str, status: int) -> Path:
    """``summary.md`` from Locust's CSV files in ``settings.out``: a conclusion, then one row per request."""
    out = settings.out
    stats_path = out / f"{CSV_PREFIX}_stats.csv"
    with open(stats_path, newline="") as stats_file:
        rows = list(csv.DictReader(stats_file))
    with open(out / f"{CSV_PREFIX}_failures.csv", newline="") as failures_file:
        failures = list(csv.DictReader(failures_file))
    total = next(row for row in rows if row["Name"] == "Aggregated")
    requests, failed = int(total["Request Count"]), int(total["Failure Count"])
    verdict = "no request failed" if failed == 0 else f"**{failed:,} requests failed** (listed below)"
    lines = [
        "# Locust against a local kvnode cluster",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `{command}`.",
        "",
        f"**{requests:,} requests in {settings.duration:g} s ({float(total['Requests/s']):,.0f}/s), "
        f"{verdict}; median {_ms(total['50%'])} ms, p99 {_ms(total['99%'])} ms.** "
        f"Locust exited with status {status}.",
        "",
        f"A fresh 3-node {settings.mode} cluster on loopback, {settings.keys:,} keys of 100 bytes filled;",
        f"{settings.users} Locust users on the first node, the default workload (`read-mostly`: 9 GETs to",
        "1 PUT, over the filled keys, no deletes). Locust's users wait for each answer (closed loop): under",
        "a stall they stop sending, so these latencies understate it. Use `python -m loadtest rate` for",
        "latency figures.",
        "",
        "| request | requests | failures | req/s | median ms | p95 ms | p99 ms | max ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        name = "all" if row["Name"] == "Aggregated" else f"{row['Type']} {row['Name']}"
        lines.append(
            f"| {name} | {int(row['Request Count']):,} | {int(row['Failure Count']):,} "
            f"| {float(row['Requests/s']):,.0f} | {_ms(row['50%'])} | {_ms(row['95%'])} | {_ms(row['99%'])} "
            f"| {_ms(row['Max Response Time'])} |"
        )
    if failures:
        lines += ["", "| failure | request | occurrences |", "|---|---|--:|"]
        lines += [f"| {f['Error']} | {f['Method']} {f['Name']} | {f['Occurrences']} |" for f in failures]
    csvs = sorted(path.name for path in out.glob(f"{CSV_PREFIX}_*.csv"))
    lines += [
        "",
        "Locust's own report: [locust.html](locust.html) (charts; opens offline) · CSV: "
        + " · ".join(f"[{name}]({name})" for name in csvs),
    ]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path
