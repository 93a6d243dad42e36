"""loadtest.selfbench: the generator's benchmark runs against the hello-world app and prints its table
and its verdict on the target (figures are printed, never asserted: this only checks that the benchmark
works); the verdict's rule on made-up rows."""

from __future__ import annotations

from loadtest.rate_result import RateResult
from loadtest.selfbench import TARGET_CPU_US, TARGET_RATE, target_verdict


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
