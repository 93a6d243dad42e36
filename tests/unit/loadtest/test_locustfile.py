"""Locust on real clusters: every workload of loadtest/locustfile.py headless with zero failures (the
cas workload's writes by outcome, its 504s the only failures), the headless run with reports (``python -m
loadtest locust``), and the web UI (``python -m loadtest ui``) starting with the default workload
selected."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

KEYS = 200


def read_stats(prefix: Path) -> dict[str, dict[str, str]]:
    """Locust's stats rows by method and name as its UI shows them ("GET /v0/entity"; "Aggregated")."""
    with open(f"{prefix}_stats.csv", newline="") as stats:
        return {f"{row['Type']} {row['Name']}".strip(): row for row in csv.DictReader(stats)}


@pytest.fixture(scope="module")
def headless_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m loadtest locust`` for 4 s: its report directory."""
    out = tmp_path_factory.mktemp("loadtest")
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", "locust", "--duration", "4", "--users", "4", "--keys", str(KEYS),
         "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=150,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    return out


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
    assert f"**{gets + puts:,} requests in 4 s" in summary
    assert "no request failed" in summary
    for link in re.findall(r"\]\(([^)]+)\)", summary):
        assert (out / link).exists(), link
