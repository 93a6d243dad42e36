"""loadtest.capacity: judging a rate from its steps, and the capacity search on made-up servers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loadtest.capacity import PRECISION, Verdict, judge, search_capacity
from loadtest.rate_result import RateResult


def _result(rate: float, p99_ms: float, achieved_share: float = 1.0, lateness_ms: float = 0.1) -> RateResult:
    result = RateResult("put", ["http://127.0.0.1:1"], rate, duration_s=1.0, elapsed_s=1.0)
    result.requests = result.sent = round(rate * achieved_share)
    for _ in range(result.requests):
        result.latency.record_us(p99_ms * 1000)
        result.lateness.record_us(lateness_ms * 1000)
    return result


def test_judge_takes_the_median_of_the_steps() -> None:
    assert judge(100, [_result(100, 10), _result(100, 60), _result(100, 20)], slo_ms=50).passed
    missed = judge(100, [_result(100, 60), _result(100, 10), _result(100, 70)], slo_ms=50)
    assert not missed.passed and missed.reason == "SLO missed (median p99 60.0 ms > 50 ms)"
    short = judge(100, [_result(100, 10, achieved_share=0.9)] * 3, slo_ms=50)
    assert short.reason == "achieved only 90% of the asked rate (median)"
    failing = _result(100, 10)
    failing.errors["504"] = 2
    assert judge(100, [failing] * 3, slo_ms=50).reason == "errors (median 2.0% of requests)"


def test_judge_passes_a_rate_met_despite_a_late_generator_and_says_so() -> None:
    late = _result(100, 10, lateness_ms=5)  # 5 ms late, over the 3 ms floor and a tenth of 10 ms
    assert not late.valid
    # Its lateness is inside the 10 ms it measured: the server met the objective all the same.
    verdict = judge(100, [late, late, _result(100, 10)], slo_ms=50)
    assert verdict.passed and verdict.reason == "generator invalid (lateness p99 5.00 ms > 3.00 ms)"
    one_in_three = judge(100, [late, _result(100, 10), _result(100, 10)], slo_ms=50)
    assert one_in_three.passed and one_in_three.reason == ""
    saturated = _result(100, 80)
    saturated.connection_waits = 50  # a saturated server holds every connection: both reasons are given
    assert judge(100, [saturated] * 3, slo_ms=50).reason == (
        "SLO missed (median p99 80.1 ms > 50 ms); generator invalid (50 requests (50.0%) waited for one "
        "of the 0 connections)"
    )


def _server(capacity: float, judged: list[float]) -> Callable[[float], Verdict]:
    def judge_rate(rate: float) -> Verdict:
        judged.append(rate)
        return Verdict(rate, rate <= capacity, "" if rate <= capacity else "SLO missed")

    return judge_rate


@pytest.mark.parametrize("capacity", [730.0, 9_000.0, 41_000.0])
def test_search_finds_the_capacity_with_no_cap_of_its_own(capacity: float) -> None:
    judged: list[float] = []
    search = search_capacity(_server(capacity, judged), start=500, budget=20)
    assert search.sustained is not None
    assert capacity / (1 + PRECISION) <= search.sustained <= capacity
    assert search.stopped.endswith(f"failed: SLO missed, within {PRECISION:.0%} of it")
    assert [verdict.rate for verdict in search.verdicts] == judged


def test_search_says_when_its_budget_ran_out() -> None:
    search = search_capacity(_server(1e9, []), start=500, budget=3)
    assert search.sustained == 2000
    assert search.stopped == "step budget of 3 rates used up; no rate failed up to 2000/s"
    halfway = search_capacity(_server(1100, []), start=500, budget=3)
    assert halfway.sustained == 1000
    assert halfway.stopped == "step budget of 3 rates used up; 2000/s failed: SLO missed"


def test_search_reports_none_when_nothing_is_sustained() -> None:
    search = search_capacity(_server(0, []), start=500, budget=20)
    assert search.sustained is None
    assert search.stopped.startswith("nothing sustained down to 10/s: ")
