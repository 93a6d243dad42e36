"""loadtest.bench_conditional's rows run for a second each against a real filled cluster (a smoke run: the
figures exist and add up, the uncontended chain applies every write in three round trips, the contended
one races)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loadtest.bench_conditional import measure_conditional, render_conditional
from loadtest.targets import fill_cluster, kvnode_cluster


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk not installed")
def test_the_rows_run_against_a_filled_cluster(tmp_path: Path) -> None:
    wrk = shutil.which("wrk")
    assert wrk is not None
    with kvnode_cluster("async", tmp_path / "data") as nodes:
        fill_cluster(nodes.urls, keys=50, value_size=10, concurrency=4)
        rows = measure_conditional(wrk, nodes.urls, nodes.pids, 50, 10, 1, tmp_path)
    put, alone, spread, shared = rows
    assert [row.clients for row in rows] == [1, 1, 8, 8] and not put.conditional
    assert put.measured.result.requests > 0 and put.measured.result.errors == 0
    # One write call to each peer; now and then a write that lost to a newer version is written again.
    assert put.round_trips == pytest.approx(1.0, abs=0.01)
    alone_result = alone.measured.result
    assert alone_result.outcomes == {
        "applied": alone_result.requests,
        "not_applied": 0,
        "unknown": 0,
        "other": 0,
    }
    assert alone.round_trips is not None and 3 <= alone.round_trips <= 3.1  # prepare, propose, commit
    assert spread.measured.result.outcomes["not_applied"] == 0  # a key each: nobody to race
    assert shared.measured.result.outcomes["applied"] > 0
    for conditional in (alone, spread, shared):
        assert conditional.measured.result.outcomes["other"] == 0 and conditional.coordinator_cpu
    assert "goal: at most 4x" in render_conditional(rows)
