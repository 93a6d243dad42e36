"""Locust on real clusters: every workload of loadtest/locustfile.py headless with zero failures (the
cas workload's writes by outcome, its 504s the only failures), the headless run with reports (``python -m
loadtest locust``), and the web UI (``python -m loadtest ui``) starting with the default workload
selected."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kvnode.ops.ports import free_ports
from profiling.render_check import check_page, find_chromium
from tests.harness import REPO, Cluster, ClusterFactory, poll

LOCUSTFILE = REPO / "loadtest" / "locustfile.py"
KEYS = 200


def read_stats(prefix: Path) -> dict[str, dict[str, str]]:
    """Locust's stats rows by method and name as its UI shows them ("GET /v0/entity"; "Aggregated")."""
    with open(f"{prefix}_stats.csv", newline="") as stats:
        return {f"{row['Type']} {row['Name']}".strip(): row for row in csv.DictReader(stats)}


def run_locust(cluster: Cluster, prefix: Path, workload: str) -> int:
    """Locust headless for 2 s, 5 users, on ``cluster`` filled with KEYS keys; its CSV at ``prefix``; its
    exit status (1: some request failed)."""
    filled = subprocess.run(
        [sys.executable, "-m", "loadtest", "fill", "--url", ",".join(cluster.urls), "--keys", str(KEYS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert filled.returncode == 0, filled.stderr
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "5", "-r", "5"]
    locust += ["-t", "2s", "--host", cluster[0].url, "--csv", str(prefix), "--kv-keys", str(KEYS)]
    locust += ["--kv-workload", workload]
    finished = subprocess.run(locust, capture_output=True, text=True, timeout=90)
    assert finished.returncode in (0, 1) and "Traceback" not in finished.stderr, finished.stderr[-3000:]
    return finished.returncode


@pytest.mark.parametrize(
    ("workload", "names"),
    [
        ("get", {"GET /v0/entity"}),
        ("delete", {"DELETE /v0/entity"}),
        # Deleted keys answer 404: a failure for get and read-mostly, a normal answer in mixed.
        ("mixed", {"PUT /v0/entity", "GET /v0/entity", "DELETE /v0/entity"}),
    ],
)
def test_workload_headless_has_no_failures(
    start_cluster: ClusterFactory, tmp_path: Path, workload: str, names: set[str]
) -> None:
    prefix = tmp_path / "locust"
    assert run_locust(start_cluster(3), prefix, workload) == 0
    rows = read_stats(prefix)
    assert set(rows) - {"Aggregated"} == names
    total = rows["Aggregated"]
    assert int(total["Request Count"]) > 0
    assert int(total["Failure Count"]) == 0


def test_cas_workload_shows_its_writes_by_outcome(start_cluster: ClusterFactory, tmp_path: Path) -> None:
    """Five users on 200 keys rarely race: most writes apply; a 412 is not a failure, a 504 is."""
    prefix = tmp_path / "locust"
    status = run_locust(start_cluster(3), prefix, "cas")
    rows = read_stats(prefix)
    read, applied, unknown = "GET /v0/entity", "PUT /v0/entity (cas applied)", "PUT /v0/entity (cas unknown)"
    writes = {applied, "PUT /v0/entity (cas not_applied)", unknown}
    assert {read, applied} <= set(rows) - {"Aggregated"} <= {read, *writes}
    count = {name: int(row["Request Count"]) for name, row in rows.items()}
    failures = {name: int(row["Failure Count"]) for name, row in rows.items()}
    assert sum(count.get(name, 0) for name in writes) <= count[read]  # each write after its read
    assert failures["Aggregated"] == failures.get(unknown, 0) == count.get(unknown, 0)
    assert status == (1 if count.get(unknown) else 0)


@pytest.fixture(scope="module")
def headless_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m loadtest locust`` for 2 s: its report directory."""
    out = tmp_path_factory.mktemp("loadtest")
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", "locust", "--duration", "2", "--users", "4", "--keys", str(KEYS),
         "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=150,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    return out


@pytest.mark.skipif(find_chromium() is None, reason="Debian's chromium is missing (apt-get install chromium)")
def test_locust_report_renders_offline(headless_run: Path, tmp_path: Path) -> None:
    chromium = find_chromium()
    assert chromium is not None
    result = check_page(chromium, headless_run / "locust.html", tmp_path / "profile")
    assert result.ok, result.problems


def _over_200_and_no_failure(stats: dict[str, Any]) -> bool:
    requests: int = sum(row["num_requests"] for row in stats["stats"])
    return stats["total_fail_per_sec"] == 0 and requests > 200


def _fetch(url: str | urllib.request.Request) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


def _template_args(ui_url: str, process: subprocess.Popen[str], deadline: float) -> dict[str, Any]:
    """The settings Locust's page starts its form with (``window.templateArgs``), once the UI serves."""
    while True:
        assert process.poll() is None, "loadtest ui exited before its UI served"
        try:
            page = _fetch(ui_url).decode()
            break
        except OSError:
            assert time.monotonic() < deadline, "Locust's UI did not answer"
            time.sleep(0.2)
    found = re.search(r"window\.templateArgs = (\{.*\})\s*$", page, re.M)
    assert found, "no templateArgs in Locust's page"
    args: dict[str, Any] = json.loads(found.group(1))
    return args


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_ui_starts_with_the_default_workload_and_stops_everything(tmp_path: Path) -> None:
    (web_port,) = free_ports(1)
    ui_url = f"http://127.0.0.1:{web_port}"
    ui = subprocess.Popen(
        [sys.executable, "-m", "loadtest", "ui", "--web-port", str(web_port), "--keys", str(KEYS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        args = _template_args(ui_url, ui, time.monotonic() + 60)
        assert not args["show_userclass_picker"]
        assert args["num_users"] == 10
        workload = args["extra_options"]["kv_workload"]
        assert workload["default_value"] == "read-mostly"
        assert set(workload["choices"]) == {"read-mostly", "get", "put", "delete", "mixed", "cas"}
        started = list(_children(ui.pid))  # the three nodes and Locust

        # Press Start with the form as it comes: the defaults.
        form = {"user_count": "3", "spawn_rate": "3", "host": args["host"]}
        form |= {name: str(option["default_value"]) for name, option in args["extra_options"].items()}
        swarm = urllib.request.Request(f"{ui_url}/swarm", data=urllib.parse.urlencode(form).encode())
        assert json.loads(_fetch(swarm))["success"]
        stats = poll(
            lambda: json.loads(_fetch(f"{ui_url}/stats/requests")),
            _over_200_and_no_failure,
            30,
            "Locust's stats",
        )
        names = {f"{row['method']} {row['name']}" for row in stats["stats"]}
        assert {"GET /v0/entity", "PUT /v0/entity"} <= names and "DELETE /v0/entity" not in names
        assert stats["fail_ratio"] == 0
    finally:
        ui.send_signal(signal.SIGINT)
        output, _ = ui.communicate(timeout=60)
    assert ui.returncode == 0, output[-3000:]  # Ctrl-C is how the UI is meant to be stopped
    assert "Traceback" not in output
    assert len(started) == 4
    assert not [pid for pid in started if Path(f"/proc/{pid}").exists()]


def test_headless_run_writes_locust_report_and_summary(headless_run: Path) -> None:
    out = headless_run
    assert (out / "locust.html").stat().st_size > 0
    rows = read_stats(out / "locust")
    gets, puts = (int(rows[f"{method} /v0/entity"]["Request Count"]) for method in ("GET", "PUT"))
    assert "DELETE /v0/entity" not in rows
    assert int(rows["Aggregated"]["Failure Count"]) == 0
    # The default workload is read-mostly: 9 GETs to 1 PUT (a wide band: the draw is random).
    assert 0.8 < gets / (gets + puts) < 0.97
    summary = (out / "summary.md").read_text()
    # The CSV holds the whole run (Locust's final write is waited for): the summary's count is its total.
    assert f"**{gets + puts:,} requests in 2 s" in summary
    assert "no request failed" in summary
    for link in re.findall(r"\]\(([^)]+)\)", summary):
        assert (out / link).exists(), link
