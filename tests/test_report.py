"""loadtest.report: the conclusion the compare report opens with, drawn from fixed runs."""

from __future__ import annotations

from loadtest.report import conclusion


def _run(mode: str, rate: float, p99: float, calls: float | None) -> dict[str, object]:
    return {
        "scenario": "healthy",
        "op": "put",
        "mode": mode,
        "kind": "rate",
        "asked_rate": rate,
        "latency_ms": {"p50": p99 / 4, "p99": p99},
        "errors": {},
        "requests": 1000,
        "replica_calls": {"per_request": calls} if calls is not None else None,
        "generator": {"valid": True, "lateness_ms": {"p99": 0.8}, "cpu_us_per_request": 24.0},
    }


def test_conclusion_names_the_winner_the_margin_and_the_latency_at_common_rates() -> None:
    runs = [_run("async", 1000, 4, 3.0), _run("sync", 1000, 8, 3.0), _run("async", 2000, 5, 3.0)]
    runs.append(_run("sync", 2000, 80, 3.0))  # over the objective: not a common rate
    searches = [
        {"scenario": "healthy", "op": "put", "mode": "async", "sustained": 5000.0, "lowest_failed": 5400.0},
        {"scenario": "healthy", "op": "put", "mode": "sync", "sustained": 4000.0, "lowest_failed": None},
    ]
    text = "\n".join(conclusion(runs, searches, slo_ms=50))
    assert "**healthy, PUT**: async sustains the most, 5,000/s; sync ≥ 4,000/s (-20%)." in text
    assert "At 1,000/s, the highest common rate all sustained, p50 / p99: async 1.0 / 4.0 ms, sync" in text
    assert "Replica calls per request: async 3.00, sync 3.00." in text
    assert "The generator kept to its schedule in every one of the 4 runs (24 µs of its CPU" in text
