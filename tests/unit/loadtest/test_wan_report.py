"""loadtest.wan_report, drawn from what was measured alone: a table row per cluster, level and op with
its samples; the conclusion (local_quorum's p99 against one datacenter's, quorum paying the WAN) only
from runs long enough to compare, else a smoke check that concludes nothing."""

from __future__ import annotations

from typing import Any

from loadtest.wan_figures import Wan
from loadtest.wan_report import report_lines


def run(
    cluster: str, ack: str, op: str, p50: float, p99: float, requests: int, duration: float
) -> dict[str, Any]:
    return {
        "cluster": cluster, "ack": ack, "op": op, "round": 0, "duration_s": duration, "requests": requests,
        "succeeded": requests, "valid": True, "latency_ms": {"p50": p50, "p99": p99},
    }  # fmt: skip


def measured(duration: float, requests: int, local_p99: float) -> Wan:
    figures = Wan(round_trip_ms=50, rate=300, duration_s=duration, warmup_s=3, rounds=1, keys=1000,
              value_size=100, cores=2, command="python -m loadtest wan")  # fmt: skip
    for op in ("put", "get"):
        figures.runs += [
            run("1 datacenter", "quorum", op, 2.0, 8.0, requests, duration),
            run("2 datacenters", "local_quorum", op, 2.5, local_p99, requests, duration),
            run("2 datacenters", "quorum", op, 53.0, 61.0, requests, duration),
            run("2 datacenters", "each_quorum", op, 53.5, 62.0, requests, duration),
        ]
    return figures


def test_a_long_enough_run_concludes_whether_local_quorum_stays_within_2x_and_quorum_pays_the_wan() -> None:
    figures = measured(duration=20, requests=6000, local_p99=12.0)
    figures.bed["delay_line"] = {
        "packets": 5000,
        "wall_s": 10.0,
        "cpu_s": 0.5,
        "late_over_1ms": 1234,
        "latest_ms": 2.5,
    }
    lines = report_lines(figures)
    assert lines[0] == "# kvnode across a WAN: latency by consistency level, one datacenter against two"
    assert any("1,234 left over 1 ms after they were due (the latest 2.5 ms late)" in line for line in lines)
    assert "| 2 datacenters | local_quorum | PUT | 1 | 6,000 | 2.50 | 12.00 | 12.0 | 0 | 0 |" in lines
    assert (
        "- PUT: `local_quorum` p99 12.00 ms is 1.50x the one-datacenter cluster's `quorum` p99 8.00 ms: "
        "within 2x. `quorum` across the two pays the WAN: p50 53.00 ms against the 50 ms round trip."
    ) in lines


def test_a_local_quorum_beyond_2x_is_said_so() -> None:
    lines = report_lines(measured(duration=20, requests=6000, local_p99=20.0))
    assert any(line.startswith("- GET: `local_quorum` p99 20.00 ms is 2.50x") and "NOT within 2x" in line
               for line in lines)  # fmt: skip


def test_a_short_run_is_a_smoke_check_that_concludes_nothing() -> None:
    lines = report_lines(measured(duration=1, requests=50, local_p99=12.0))
    assert lines[0].startswith("# Smoke check: ")
    assert "## What it shows" not in lines and not any("2x" in line for line in lines)
    assert "| 1 datacenter | quorum | GET | 1 | 50 | 2.00 | 8.00 | 8.0 | 0 | 0 |" in lines
