"""loadtest.selfbench: the generator's benchmark runs against the hello-world app and prints its table
and its verdict on the target (figures are printed, never asserted: this only checks that the benchmark
works); the verdict's rule on made-up rows."""

from __future__ import annotations

import subprocess
import sys

from loadtest.rate_result import RateResult
from loadtest.selfbench import TARGET_CPU_US, TARGET_RATE, target_verdict


def test_selfbench_prints_a_row_per_rate_and_worker_count_and_how_to_reproduce_it() -> None:
    argv = ["selfbench", "--rates", "200,400", "--duration", "0.5", "--workers", "1,2", "--connections", "8"]
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", *argv], capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    rows = [line for line in finished.stdout.splitlines() if line.startswith("| ") and "VALID" in line]
    assert [(row.split(" | ")[0], row.split(" | ")[2]) for row in rows] == [
        ("| 200", "1"),
        ("| 400", "1"),
        ("| 200", "2"),
        ("| 400", "2"),
    ]
    assert "generator µs CPU / req" in finished.stdout
    reproduce = "python -m loadtest selfbench --rates 200,400 --duration 0.5 --workers 1,2 --connections 8"
    assert f"Reproduce: `{reproduce}`" in finished.stdout
    assert "**Verdict: not judged: no row asked for 10,000 req/s or more.**" in finished.stdout


def _row(rate: float, cpu_us: float, errors: int = 0, workers: int = 2) -> RateResult:
    requests = round(rate)
    result = RateResult("get", ["http://127.0.0.1:1"], rate, 1.0, workers, sent=requests, requests=requests)
    result.elapsed_s, result.cpu_s = 1.0, cpu_us * requests / 1e6
    result.errors["500"] = errors
    for _ in range(100):
        result.latency.record_us(1000)
        result.lateness.record_us(100)
    return result


def test_verdict_names_the_row_that_met_the_target_or_why_none_did() -> None:
    below = _row(TARGET_RATE / 2, 10)
    assert target_verdict([below, _row(TARGET_RATE, TARGET_CPU_US - 1)]) == (
        f"target met: 10,000 req/s with 2 workers, VALID at {TARGET_CPU_US - 1:.1f} µs CPU/request."
    )
    assert target_verdict([_row(TARGET_RATE, TARGET_CPU_US + 5), _row(TARGET_RATE, 10, errors=500)]) == (
        "target NOT met: the closest row, 10,000 req/s with 2 workers: 35.0 µs CPU/request > 30."
    )
    failing = target_verdict([_row(TARGET_RATE, 10, errors=600)])
    assert failing == (
        "target NOT met: the closest row, 10,000 req/s with 2 workers: 600 of 10000 requests failed "
        "(6.0% > 1%); achieved 9,400/s."
    )
    assert target_verdict([below]) == "not judged: no row asked for 10,000 req/s or more."
