"""loadtest.ladder: when a rung holds, and the table it prints."""

from __future__ import annotations

from loadtest.ladder import Rung, held, render
from loadtest.rate_result import RateResult


def result(asked: float, succeeded: int, latency_us: float, failed: int = 0) -> RateResult:
    run = RateResult("put", ["http://127.0.0.1:1"], asked, 10.0, elapsed_s=10.0)
    run.requests = run.sent = succeeded + failed
    for _ in range(succeeded + failed):
        run.latency.record_us(latency_us)
        run.lateness.record_us(10)
    if failed:
        run.errors["status 504"] = failed
    return run


def test_a_rung_holds_only_on_time_at_the_rate_and_without_errors() -> None:
    assert held(result(1000, 10_000, 2_000), slo_ms=50) == ""
    assert held(result(1000, 10_000, 60_000), slo_ms=50).startswith("p99 60")
    assert "achieved 900/s" in held(result(1000, 9_000, 2_000), slo_ms=50)
    assert "failed" in held(result(1000, 9_800, 2_000, failed=200), slo_ms=50)
    late = result(1000, 10_000, 2_000)  # latency runs from the intended send time: lateness is in it
    for _ in range(200):
        late.lateness.record_us(20_000)
    assert held(late, slo_ms=50) == ""


def test_the_table_has_a_line_a_rung_with_the_servers_cpu_per_request() -> None:
    table = render([Rung("put", result(1000, 10_000, 2_000), 0.5)], slo_ms=50)
    assert "| PUT | 1,000 | 1,000 | 2.00 ms | 2.00 ms | 0 | 50 µs | 0.01 ms | held |" in table
