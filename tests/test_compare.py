"""loadtest.compare: the max-rate search on made-up results, and ``compare --quick`` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from loadtest.compare import search_max_rate, sustains
from loadtest.openloop import RateResult
from loadtest.scenarios import SCENARIOS


def _result(rate: float, p99_ms: float, achieved_share: float = 1.0) -> RateResult:
    result = RateResult("put", ["http://127.0.0.1:1"], rate, duration_s=1.0, elapsed_s=1.0)
    result.requests = round(rate * achieved_share)
    for _ in range(result.requests):
        result.latency.record_us(p99_ms * 1000)
    return result


def test_sustains_needs_p99_rate_and_few_errors() -> None:
    assert sustains(_result(100, 10), slo_ms=50)
    assert not sustains(_result(100, 60), slo_ms=50)
    assert not sustains(_result(100, 10, achieved_share=0.9), slo_ms=50)
    failing = _result(100, 10)
    failing.errors["504"] = 2
    assert not sustains(failing, slo_ms=50)


def test_search_brackets_the_limit_within_the_step_budget() -> None:
    limit = 730.0  # the made-up server meets a 50 ms p99 up to this rate
    measured: list[float] = []

    def measure(rate: float) -> RateResult:
        measured.append(rate)
        return _result(rate, 10 if rate <= limit else 80)

    tried = [measure(rate) for rate in (100, 300)]
    best = search_max_rate(measure, tried, slo_ms=50, steps=8)
    assert best is not None and 0.9 * limit <= best <= limit
    assert len(measured) <= 2 + 8


def test_search_reports_none_when_nothing_meets_the_slo() -> None:
    assert search_max_rate(lambda rate: _result(rate, 500), [_result(100, 500)], slo_ms=50, steps=3) is None


def test_compare_quick_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "report"
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", "compare", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "left]" in finished.stderr  # progress lines

    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    modes = ("async", "sync")
    for scenario in SCENARIOS:
        section = report.split(f"## {scenario}\n", 1)[1].split("\n## ", 1)[0]
        for mode in modes:
            assert f"| {mode} |" in section, (scenario, mode)
        for op in ("put", "get"):
            assert (out / "plots" / f"latency-{scenario}-{op}.png").stat().st_size > 10_000
        assert {run["mode"] for run in results["runs"] if run["scenario"] == scenario} == set(modes)
        assert {row["mode"] for row in results["sustained"] if row["scenario"] == scenario} == set(modes)
    assert (out / "plots" / "achieved-vs-asked.png").stat().st_size > 10_000
    for run in results["runs"]:
        assert (out / run["hdr"]).read_text().startswith("HISTF")
        assert run["requests"] > 0
