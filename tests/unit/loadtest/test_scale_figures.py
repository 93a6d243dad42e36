"""loadtest.scale_figures: each shape's figures over its runs, with their counts (test_scale_report checks
the words drawn from them); a run less idle is judged by its own round's idle reading, and a shape's idle
readings are pooled."""

from __future__ import annotations

import pytest

from loadtest.scale_figures import Figure, Shape, round_ratios, summarise, work_us
from tests.scale_runs import idle_reading, scale_run


def test_each_figure_is_the_median_and_range_of_a_shapes_runs_with_its_count() -> None:
    runs = [
        scale_run(12, 2, cpu_us=700),
        scale_run(3, 0, cpu_us=400),
        scale_run(12, 0, cpu_us=600),
        scale_run(12, 1, cpu_us=650),
    ]
    small, large = summarise(runs, [idle_reading(3, 0.03), idle_reading(12, 0.15)])
    assert (small.shape, large.shape) == (Shape(3, 2), Shape(12, 2))  # smallest first
    assert (small.runs, large.runs, large.requests) == (1, 3, 3 * 4500)
    assert large.cpu_us == Figure(650, 600, 700, 3)
    assert large.cpu_us.text("{:,.0f}") == "650 (600-700, n=3)"
    assert small.cpu_us is not None and small.cpu_us.text("{:.0f}") == "400 (n=1)"
    # Less idle: 0.15 s of CPU a second over the 15 s run, spread over its 4,500 requests, is 500 µs.
    assert large.work_us is not None
    assert (large.work_us.median, large.work_us.low, large.work_us.high) == pytest.approx((150, 100, 200))
    assert work_us(runs[0], None) is None


def test_a_run_less_idle_is_judged_by_its_own_rounds_idle_reading_and_the_readings_are_pooled() -> None:
    """Rounds alternate the shapes, and each run has the idle reading taken just before it on its cluster: a
    busier spell of the machine in one round moves that round's run and reading together."""
    runs = [scale_run(12, repeat, cpu_us=600) for repeat in range(3)]
    idle = [idle_reading(12, cpu, repeat) for repeat, cpu in enumerate([0.0, 0.15, 0.03])]
    (large,) = summarise(runs, idle)
    # 0.15 s of CPU a second over a 15 s run of 4,500 requests is 500 us a request; 0.03, 100 us.
    assert large.work_us is not None
    assert (large.work_us.median, large.work_us.low, large.work_us.high) == pytest.approx((500, 100, 600))
    assert large.idle is not None
    assert (large.idle["readings"], large.idle["idle_s"], large.idle["idle_calls"]) == (3, 15.0, 300)
    assert large.idle["idle_cpu_s"] == pytest.approx(5.0 * 0.18)


def test_round_by_round_each_rounds_large_run_is_set_against_the_same_rounds_small_one() -> None:
    """Less idle, each run less its own round's idle reading; with the background, the runs' CPU as it is.
    A round that measured one shape only pairs nothing; under two pairs there is no figure."""
    small, large = Shape(3, 2), Shape(12, 2)
    runs = [scale_run(3, 0, cpu_us=400), scale_run(12, 0, cpu_us=800), scale_run(3, 1, cpu_us=500)]
    runs += [scale_run(12, 1, cpu_us=500), scale_run(12, 2, cpu_us=900)]
    idle = [
        idle_reading(3, 0.0, 0),
        idle_reading(12, 0.06, 0),
        idle_reading(3, 0.0, 1),
        idle_reading(12, 0.0, 1),
    ]
    ratios = round_ratios(runs, idle, small, large)
    assert ratios is not None
    less_idle, total = ratios
    # Round 0: 800 us less 0.06 s a second over 15 s spread over 4,500 requests (200 us) against 400 us.
    assert (less_idle.low, less_idle.high, less_idle.samples) == pytest.approx((1.0, 1.5, 2))
    assert (total.low, total.high, total.samples) == pytest.approx((1.0, 2.0, 2))
    assert round_ratios(runs[:2], idle, small, large) is None
