"""loadtest.compare: its progress lines, and ``compare --quick`` end to end (test_report checks the written
conclusion; test_capacity the search, test_replica_calls the counters)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvnode.coordinator.fanout import FANOUTS


@pytest.mark.slow
def test_compare_quick_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "report"
    # Low rates and short runs: the pipeline end to end, at a fraction of the CPU the --quick rates take.
    argv = [
        "compare",
        "--quick",
        "--scenarios",
        "healthy,replica-down",
        "--search-budget",
        "2",
        "--rates",
        "50,100",
    ]
    argv += ["--duration", "0.5", "--search-duration", "0.3"]
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "left]" in finished.stderr  # progress lines

    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    modes = list(FANOUTS)  # every registered mode, without being told
    assert (
        report.index("## Conclusion") < report.index("## How it was measured") < report.index("## Capacity")
    )
    for scenario in ("healthy", "replica-down"):
        section = report.split(f"## {scenario}\n", 1)[1].split("\n## ", 1)[0]
        for mode in modes:
            assert f"| {mode} | common rate |" in section, (scenario, mode)
            assert f"| {mode} | search step 3 |" in section, (scenario, mode)
        for op in ("put", "get"):
            assert (out / "plots" / f"latency-{scenario}-{op}.png").stat().st_size > 10_000
        assert (out / "plots" / f"rate-{scenario}.png").stat().st_size > 10_000
        assert {run["mode"] for run in results["runs"] if run["scenario"] == scenario} == set(modes)
        searched = [row for row in results["searches"] if row["scenario"] == scenario]
        assert {row["mode"] for row in searched} == set(modes)
        for row in searched:
            assert row["stopped"] and len(row["verdicts"]) <= 2
    assert (out / "plots" / "capacity.png").stat().st_size > 10_000
    for run in results["runs"]:
        assert (out / run["hdr"]).read_text().startswith("HISTF")
        assert run["requests"] > 0
        assert {"valid", "cpu_us_per_request", "lateness_ms"} <= set(run["generator"])
        assert "replica_calls" in run  # None where the nodes expose no counters: "n/a" in the report
    assert report.startswith("# Smoke check: ")  # 0.6 s steps and 1 s runs compare nothing

    # The report is drawn again from results.json, and from a results.json written before it kept the
    # "How it was measured" lines (they come from the previous report then).
    (out / "plots" / "capacity.png").unlink()
    for results_json in (results, {name: value for name, value in results.items() if name != "header"}):
        (out / "results.json").write_text(json.dumps(results_json))
        redraw = [sys.executable, "-m", "loadtest", "report", "--out", str(out)]
        finished = subprocess.run(redraw, capture_output=True, text=True, timeout=120)
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert (out / "report.md").read_text() == report
        assert (out / "plots" / "capacity.png").stat().st_size > 10_000
