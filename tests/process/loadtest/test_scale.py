"""loadtest.scale: the shapes its flags ask for, its one-line refusals, and a short run end to end on real
nodes (test_scale_report checks the report's words)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.scale_report import CALLS_TOLERANCE


@pytest.mark.slow
def test_a_short_run_on_3_and_4_members_writes_its_report_and_plot(tmp_path: Path) -> None:
    """Real nodes on modelled hosts (127.0.0.1, 127.0.0.2), token-aware load: each request makes from = 3
    replica calls, whatever the members; two rounds, each shape in turn in each, with an idle reading
    before each run."""
    out = tmp_path / "scale"
    argv = ["--members", "3,4", "--per-host", "2", "--duration", "2", "--repeats", "2", "--warmup", "1"]
    argv += ["--idle", "1", "--keys", "200", "--rate", "100", "--out", str(out)]
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", "scale", *argv], capture_output=True, text=True, timeout=400
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "planned left] 4 members, 2 hosts of 2: run 2 of 2" in finished.stderr  # progress lines

    results = json.loads((out / "results.json").read_text())
    rounds = [(3, 0), (4, 0), (3, 1), (4, 1)]  # (members, round), in the order measured
    assert [(run["members"], run["repeat"]) for run in results["runs"]] == rounds
    assert [(row["members"], row["repeat"]) for row in results["idle"]] == rounds
    assert [run["hosts"] for run in results["runs"]] == [2, 2, 2, 2]
    assert {url.split(":")[1] for url in results["runs"][1]["urls"]} == {"//127.0.0.1", "//127.0.0.2"}
    for run in results["runs"]:
        assert run["requests"] == 200
        assert run["replica_calls"]["per_request"] == pytest.approx(3, rel=CALLS_TOLERANCE)
        assert run["server_cpu_us_per_request"] > 0
    assert [row["idle_s"] >= 1 for row in results["idle"]] == [True] * 4
    report = (out / "scale.md").read_text()
    assert report.startswith("# Smoke check: ")  # 2 s runs of 200 requests conclude nothing
    assert "| 4 members, 2 hosts of 2 | 2 | 400 |" in report
    assert (out / "scale.png").stat().st_size > 10_000
