"""loadtest.report: the conclusion and the headline the compare report opens with, drawn from fixed runs:
what each conclusion rests on, and no comparison below the minimums (a quick run is a smoke check)."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest.report import MIN_RUN_REQUESTS, MIN_RUN_S, conclusion, headline


def _run(
    mode: str, rate: float, p99: float, calls: float | None, kind: str = "rate", seconds: float = 10.0
) -> dict[str, object]:
    return {
        "scenario": "healthy",
        "op": "put",
        "mode": mode,
        "kind": kind,
        "asked_rate": rate,
        "duration_s": seconds,
        "latency_ms": {"p50": p99 / 4, "p99": p99},
        "errors": {},
        "requests": round(rate * seconds),
        "replica_calls": {"per_request": calls} if calls is not None else None,
        "generator": {"valid": True, "lateness_ms": {"p99": 0.8}, "cpu_us_per_request": 24.0},
    }


SEARCHES: list[dict[str, Any]] = [
    {"scenario": "healthy", "op": "put", "mode": "async", "sustained": 5000.0, "lowest_failed": 5400.0},
    {"scenario": "healthy", "op": "put", "mode": "sync", "sustained": 4000.0, "lowest_failed": None},
]


def _steps(seconds: float) -> list[dict[str, object]]:
    """Three search steps at each mode's sustained rate."""
    return [
        _run(row["mode"], row["sustained"], 10, 3.0, kind="search", seconds=seconds)
        for row in SEARCHES
        for _ in range(3)
    ]


def test_conclusion_names_the_winner_the_margin_the_latency_and_what_each_rests_on() -> None:
    runs = [_run("async", 1000, 4, 3.0), _run("sync", 1000, 8, 3.0), _run("async", 2000, 5, 3.0)]
    runs.append(_run("sync", 2000, 80, 3.0))  # over the objective: not a common rate
    runs += _steps(seconds=3)
    text = "\n".join(conclusion(runs, SEARCHES, slo_ms=50))
    assert (
        "**healthy, PUT**: async sustains the most, 5,000/s; sync ≥ 4,000/s (-20%) (each rate judged by "
        "the median of 3 steps of 3 s)." in text
    )
    assert (
        "At 1,000/s, the highest common rate all sustained, p50 / p99: async 1.0 / 4.0 ms, sync 2.0 / 8.0 "
        "ms (one run of 10 s per mode, at least 10,000 requests each)." in text
    )
    assert "Replica calls per request: async 3.00, sync 3.00 (median over at least 5 runs per mode)." in text
    assert "The generator kept to its schedule in every one of the 10 runs (24 µs of its CPU" in text
    assert headline(runs, ["async", "sync"]) == ["# kvnode: replica fan-out modes compared (async, sync)"]
    tie = [{**row, "sustained": 5000.0} for row in SEARCHES]
    assert "async and sync sustain the most, 5,000/s (each rate" in "\n".join(conclusion(runs, tie, 50))


def test_quick_runs_are_a_smoke_check_that_compares_nothing() -> None:
    """The issue's case: "sync sustains the most, ≥ 12,000/s; async 6,000/s (-50%)" from 0.6 s steps."""
    runs = [_run("async", 500, 4, 3.0, seconds=1), _run("sync", 500, 8, 3.0, seconds=1), *_steps(0.6)]
    text = "\n".join(conclusion(runs, SEARCHES, slo_ms=50))
    assert (
        "Capacity not compared: each rate judged by the median of 3 steps of 0.6 s, under the 2 s a step "
        "needs" in text
    )
    assert "Latency not compared: every common-rate run lasted under 2 s or had fewer than 1,000" in text
    assert "sustains the most" not in text and "p50 / p99" not in text
    title = headline(runs, ["async", "sync"])
    assert title[0].startswith("# Smoke check: ") and "8 of 8 runs lasted 0.6-1 s, under the 2 s" in title[2]


@pytest.mark.parametrize(
    ("seconds", "rate", "compared"),
    [
        (MIN_RUN_S, MIN_RUN_REQUESTS / MIN_RUN_S, True),  # exactly at both minimums
        (MIN_RUN_S * 0.9, 10 * MIN_RUN_REQUESTS, False),  # many requests, too short
        (10 * MIN_RUN_S, (MIN_RUN_REQUESTS - 10) / (10 * MIN_RUN_S), False),  # long, too few requests
    ],
)
def test_minimums_for_a_comparison(seconds: float, rate: float, compared: bool) -> None:
    runs = [_run(mode, rate, 4, None, seconds=seconds) for mode in ("async", "sync")]
    runs += _steps(seconds)
    text = "\n".join(conclusion(runs, SEARCHES, slo_ms=50))
    assert ("p50 / p99" in text) == compared
    assert ("sustains the most" in text) == (seconds >= MIN_RUN_S)
