"""loadtest.scale_figures: each shape's figures over its runs, with their counts (test_scale_report checks
the words drawn from them)."""

from __future__ import annotations

import pytest

from loadtest.scale_figures import Figure, Shape, summarise, work_us
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
