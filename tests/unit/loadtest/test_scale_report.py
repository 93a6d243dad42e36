"""loadtest.scale_report: each shape's figures over its runs, the conclusion drawn from them alone, and the
report and plot written from results.json's contents (test_scale runs the measurement itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtest.scale_report import (
    Figure,
    Run,
    Shape,
    conclusion,
    report_text,
    summarise,
    work_us,
    write_report,
)

RATE = 300.0


def _run(
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


def _idle(members: int, cpu_per_s: float) -> Run:
    return {
        "members": members,
        "per_host": 2,
        "idle_s": 5.0,
        "idle_cpu_s": 5.0 * cpu_per_s,
        "idle_calls": 100,
    }


def _results(runs: list[Run], idle: list[Run]) -> dict[str, Any]:
    settings = {"op": "mixed", "rate": RATE, "replication_factor": 3, "repeats": 3, "duration": 15.0}
    return {
        "settings": settings,
        "header": ["- **command**: `python -m loadtest scale`"],
        "runs": runs,
        "idle": idle,
    }


def test_each_figure_is_the_median_and_range_of_a_shapes_runs_with_its_count() -> None:
    runs = [_run(12, 2, cpu_us=700), _run(3, 0, cpu_us=400), _run(12, 0, cpu_us=600), _run(12, 1, cpu_us=650)]
    small, large = summarise(runs, [_idle(3, 0.03), _idle(12, 0.15)])
    assert (small.shape, large.shape) == (Shape(3, 2), Shape(12, 2))  # smallest first
    assert (small.runs, large.runs, large.requests) == (1, 3, 3 * 4500)
    assert large.cpu_us == Figure(650, 600, 700, 3)
    assert large.cpu_us.text("{:,.0f}") == "650 (600-700, n=3)"
    assert small.cpu_us is not None and small.cpu_us.text("{:.0f}") == "400 (n=1)"
    # Less idle: 0.15 s of CPU a second over the 15 s run, spread over its 4,500 requests, is 500 µs.
    assert large.work_us is not None
    assert (large.work_us.median, large.work_us.low, large.work_us.high) == pytest.approx((150, 100, 200))
    assert work_us(runs[0], None) is None


@pytest.mark.parametrize(("large_work", "verdict"), [(660.0, "within"), (800.0, "**beyond**")])
def test_work_per_request_is_judged_against_the_bound_less_the_idle_background(
    large_work: float, verdict: str
) -> None:
    idle_us = 0.15 / RATE * 1e6  # the 12-member cluster's idle CPU a second, per request at RATE
    runs = [_run(3, i, cpu_us=600) for i in range(3)] + [
        _run(12, i, cpu_us=large_work + idle_us) for i in range(3)
    ]
    lines = conclusion(summarise(runs, [_idle(3, 0.0), _idle(12, 0.15)]), from_=3, rate=RATE)
    work = next(line for line in lines if "Work per request" in line)
    assert f"{verdict} the 1.2x bound" in work
    assert f"{large_work / 600:.2f}x at 12 members, 6 hosts of 2" in work
    assert "n=3" in work
    idle = next(line for line in lines if "Idle background" in line)
    assert "0.000 s of CPU a second at 3 members and 0.150 at 12" in idle
    assert "Replica calls per request equal from = 3" in lines[2]
    assert "every run of every shape achieved at least 95%" in lines[3]


def test_replica_calls_off_from_and_a_shape_that_fell_behind_are_said() -> None:
    runs = [_run(3), _run(12, calls=3.2, achieved=200.0)]
    lines = conclusion(summarise(runs, [_idle(3, 0.0), _idle(12, 0.1)]), from_=3, rate=RATE)
    text = "\n".join(lines)
    assert "Work per request: not compared: at 12 members, 6 hosts of 2 some runs fell under 95%" in text
    assert "strayed over 2% from from = 3 at 12 members, 6 hosts of 2" in text
    assert "some runs fell under 95% of the asked 300/s: 12 members, 6 hosts of 2 (200 (n=1)/s)" in text


def test_p99_differs_only_where_the_runs_ranges_are_apart() -> None:
    apart = [*(_run(3, i, p99=2.0 + i) for i in range(3)), *(_run(12, i, p99=9.0 + i) for i in range(3))]
    overlapping = [
        *(_run(3, i, p99=2.0 + 4 * i) for i in range(3)),
        *(_run(12, i, p99=5.0) for i in range(3)),
    ]
    idle = [_idle(3, 0.0), _idle(12, 0.0)]
    assert "p99 was higher in every run at 12 members" in conclusion(summarise(apart, idle), 3, RATE)[-1]
    assert "ranges of the runs overlap" in conclusion(summarise(overlapping, idle), 3, RATE)[-1]


def test_runs_too_short_conclude_nothing_and_invalid_runs_are_counted() -> None:
    idle = [_idle(3, 0.0), _idle(12, 0.0)]
    assert conclusion(summarise([_run(3, duration=1.0), _run(12, duration=1.0)], idle), 3, RATE) == [
        "- Smoke check: some runs lasted under 2 s or had fewer than 1,000 requests: nothing is concluded; "
        "the tables show what ran."
    ]
    lines = conclusion(summarise([_run(3), _run(12, valid=False)], idle), 3, RATE)
    assert lines[-1].startswith("- 1 of 2 runs were INVALID")


def test_the_report_states_its_samples_and_how_it_was_measured(tmp_path: Path) -> None:
    runs = [_run(members, i) for members in (3, 6, 12) for i in range(3)]
    results = _results(runs, [_idle(3, 0.01), _idle(6, 0.02), _idle(12, 0.04)])
    text = report_text(results, "scale.png")
    assert text.startswith("# kvnode scaling: one constant-rate load on 3 members, 2 hosts of 2+1 vs ")
    assert text.index("## Conclusion") < text.index("## Figures") < text.index("## How it was measured")
    assert "| 12 members, 6 hosts of 2 | 3 | 13,500 | 300 (300-300, n=3) |" in text
    assert "- **command**: `python -m loadtest scale`" in text
    assert text.count("| VALID |") == 9  # a row a run

    short = report_text(_results([_run(3, duration=1.0), _run(6, duration=1.0)], []), "scale.png")
    assert short.startswith("# Smoke check: ")
    assert "| n/a |" in short  # no idle reading: no figure less idle

    report = write_report(tmp_path, results)
    assert report.read_text() == text
    assert (tmp_path / "scale.png").stat().st_size > 10_000


def test_an_idle_reading_above_a_runs_own_cpu_compares_no_work() -> None:
    """The runs' CPU less an idle reading larger than it would be a negative work per request."""
    runs = [_run(3, cpu_us=500), _run(12, cpu_us=500)]
    idle = [_idle(3, 0.0), {**_idle(12, 0.5), "idle_calls": None}]  # 0.5 s/s over 300/s: 1,667 µs each
    lines = conclusion(summarise(runs, idle), from_=3, rate=RATE)
    assert lines[0].startswith("- Work per request: not compared: the idle cluster's CPU over a run's span")
    assert "replica calls a second" not in lines[1]  # no idle call counts: none said
