"""Runs and idle readings as loadtest.scale records them in results.json, for the tests of
loadtest.scale_figures and loadtest.scale_report."""

from __future__ import annotations

from typing import Any

from loadtest.scale_figures import Run, Shape

__all__ = ["RATE", "idle_reading", "scale_results", "scale_run"]

RATE = 300.0


def scale_run(
    members: int,
    repeat: int = 0,
    *,
    cpu_us: float = 500.0,
    calls: float | None = 3.0,
    p99: float = 5.0,
    achieved: float = RATE,
    duration: float = 15.0,
    valid: bool = True,
) -> Run:
    """One run as loadtest.scale records it: RATE/s for ``duration`` seconds, every request finished."""
    requests = int(RATE * duration)
    return {
        "members": members,
        "per_host": 2,
        "hosts": Shape(members, 2).hosts,
        "repeat": repeat,
        "asked_rate": RATE,
        "achieved_rate": achieved,
        "duration_s": duration,
        "requests": requests,
        "errors": {},
        "valid": valid,
        "invalid_reasons": [] if valid else ["lateness p99 9.00 ms > 3.00 ms"],
        "latency_ms": {"p50": 1.0, "p99": p99},
        "replica_calls": None if calls is None else {"per_request": calls},
        "server_cpu_s": cpu_us * requests / 1e6,
        "cpu_span_s": duration,
        "server_cpu_us_per_request": cpu_us,
    }


def idle_reading(members: int, cpu_per_s: float, repeat: int | None = None) -> Run:
    """An idle reading of 5 s; with ``repeat``, of that round (before its run), as loadtest.scale takes it."""
    return {
        "members": members,
        "per_host": 2,
        "idle_s": 5.0,
        "idle_cpu_s": 5.0 * cpu_per_s,
        "idle_calls": 100,
        **({} if repeat is None else {"repeat": repeat}),
    }


def scale_results(runs: list[Run], idle: list[Run]) -> dict[str, Any]:
    settings = {"op": "mixed", "rate": RATE, "replication_factor": 3, "repeats": 3, "duration": 15.0}
    return {
        "settings": settings,
        "header": ["- **command**: `python -m loadtest scale`"],
        "runs": runs,
        "idle": idle,
    }
