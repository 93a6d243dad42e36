"""loadtest.scale_report: the conclusion drawn from the figures alone, and the report and plot written from
results.json's contents (test_scale runs the measurement itself, test_scale_figures checks the figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.scale_figures import summarise
from loadtest.scale_report import conclusion, report_text, write_report
from tests.scale_runs import RATE, idle_reading, scale_results, scale_run


@pytest.mark.parametrize(("large_work", "verdict"), [(660.0, "within"), (800.0, "**beyond**")])
def test_work_per_request_is_judged_against_the_bound_less_the_idle_background(
    large_work: float, verdict: str
) -> None:
    idle_us = 0.15 / RATE * 1e6  # the 12-member cluster's idle CPU a second, per request at RATE
    runs = [scale_run(3, i, cpu_us=600) for i in range(3)] + [
        scale_run(12, i, cpu_us=large_work + idle_us) for i in range(3)
    ]
    lines = conclusion(summarise(runs, [idle_reading(3, 0.0), idle_reading(12, 0.15)]), from_=3, rate=RATE)
    work = next(line for line in lines if "Work per request" in line)
    assert f"{verdict} the 1.2x bound" in work
    assert f"{large_work / 600:.2f}x at 12 members, 6 hosts of 2" in work
    assert "n=3" in work
    idle = next(line for line in lines if "Idle background" in line)
    assert "0.000 s of CPU a second at 3 members and 0.150 at 12" in idle
    assert "(1 reading(s) of 5.0 s each a shape)" in idle
    assert "Replica calls per request equal from = 3" in lines[2]
    assert "every run of every shape achieved at least 95%" in lines[3]


def test_replica_calls_off_from_and_a_shape_that_fell_behind_are_said() -> None:
    runs = [scale_run(3), scale_run(12, calls=3.2, achieved=200.0)]
    lines = conclusion(summarise(runs, [idle_reading(3, 0.0), idle_reading(12, 0.1)]), from_=3, rate=RATE)
    text = "\n".join(lines)
    assert "Work per request: not compared: at 12 members, 6 hosts of 2 some runs fell under 95%" in text
    assert "strayed over 2% from from = 3 at 12 members, 6 hosts of 2" in text
    assert "some runs fell under 95% of the asked 300/s: 12 members, 6 hosts of 2 (200 (n=1)/s)" in text


def test_p99_differs_only_where_the_runs_ranges_are_apart() -> None:
    apart = [
        *(scale_run(3, i, p99=2.0 + i) for i in range(3)),
        *(scale_run(12, i, p99=9.0 + i) for i in range(3)),
    ]
    overlapping = [
        *(scale_run(3, i, p99=2.0 + 4 * i) for i in range(3)),
        *(scale_run(12, i, p99=5.0) for i in range(3)),
    ]
    idle = [idle_reading(3, 0.0), idle_reading(12, 0.0)]
    assert "p99 was higher in every run at 12 members" in conclusion(summarise(apart, idle), 3, RATE)[-1]
    assert "ranges of the runs overlap" in conclusion(summarise(overlapping, idle), 3, RATE)[-1]


def test_runs_too_short_conclude_nothing_and_invalid_runs_are_counted() -> None:
    idle = [idle_reading(3, 0.0), idle_reading(12, 0.0)]
    assert conclusion(
        summarise([scale_run(3, duration=1.0), scale_run(12, duration=1.0)], idle), 3, RATE
    ) == [
        "- Smoke check: some runs lasted under 2 s or had fewer than 1,000 requests: nothing is concluded; "
        "the tables show what ran."
    ]
    lines = conclusion(summarise([scale_run(3), scale_run(12, valid=False)], idle), 3, RATE)
    assert lines[-1].startswith("- 1 of 2 runs were INVALID")


def test_the_report_states_its_samples_and_how_it_was_measured(tmp_path: Path) -> None:
    runs = [scale_run(members, i) for members in (3, 6, 12) for i in range(3)]
    results = scale_results(runs, [idle_reading(3, 0.01), idle_reading(6, 0.02), idle_reading(12, 0.04)])
    text = report_text(results, "scale.png")
    assert text.startswith("# kvnode scaling: one constant-rate load on 3 members, 2 hosts of 2+1 vs ")
    assert text.index("## Conclusion") < text.index("## Figures") < text.index("## How it was measured")
    assert "| 12 members, 6 hosts of 2 | 3 | 13,500 | 300 (300-300, n=3) |" in text
    assert "- **command**: `python -m loadtest scale`" in text
    assert text.count("| VALID |") == 9  # a row a run

    short = report_text(
        scale_results([scale_run(3, duration=1.0), scale_run(6, duration=1.0)], []), "scale.png"
    )
    assert short.startswith("# Smoke check: ")
    assert "| n/a |" in short  # no idle reading: no figure less idle

    report = write_report(tmp_path, results)
    assert report.read_text() == text
    assert (tmp_path / "scale.png").stat().st_size > 10_000


def test_an_idle_reading_above_a_runs_own_cpu_compares_no_work() -> None:
    """The runs' CPU less an idle reading larger than it would be a negative work per request."""
    runs = [scale_run(3, cpu_us=500), scale_run(12, cpu_us=500)]
    idle = [
        idle_reading(3, 0.0),
        {**idle_reading(12, 0.5), "idle_calls": None},
    ]  # 0.5 s/s over 300/s: 1,667 µs each
    lines = conclusion(summarise(runs, idle), from_=3, rate=RATE)
    assert lines[0].startswith("- Work per request: not compared: the idle cluster's CPU over a run's span")
    assert "replica calls a second" not in lines[1]  # no idle call counts: none said


def test_the_report_sets_each_rounds_largest_shape_against_its_smallest() -> None:
    """Rounds of 550, 600 and 650 us at 12 members against 500 at 3, with no idle background."""
    runs = [scale_run(3, r, cpu_us=500) for r in range(3)] + [
        scale_run(12, r, cpu_us=550 + 50 * r) for r in range(3)
    ]
    idle = [idle_reading(members, 0.0, r) for members in (3, 12) for r in range(3)]
    report = report_text(scale_results(runs, idle), "scale.png")
    line = next(line for line in report.splitlines() if "Round by round" in line)
    assert "1.20x (1.10x-1.30x, n=3) less idle, 1.20x (1.10x-1.30x, n=3) with the idle background" in line
