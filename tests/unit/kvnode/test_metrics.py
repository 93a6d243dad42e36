"""kvnode.metrics' buckets and recent latency, and GET /metrics on real
nodes: Prometheus text that
prometheus_client's own parser reads, requests by operation and status (the known ones at 0 from the
start), every replica call a coordinator makes, hints pending for a stopped peer until it is back."""

from __future__ import annotations

import pytest

from kvnode.metrics import FixedBuckets, RecentLatency


def test_fixed_buckets_are_cumulative_with_a_bound_in_its_own_bucket() -> None:
    buckets = FixedBuckets((0.001, 0.01))
    for seconds in (0.001, 0.005, 0.01, 0.02):
        buckets.observe(seconds)
    assert buckets.cumulative() == [1, 3, 4]
    assert buckets.count == 4
    assert abs(buckets.sum - 0.036) < 1e-12


def test_recent_latency_forgets_a_burst_once_its_time_window_has_passed() -> None:
    recent = RecentLatency(99.0, window=5000, window_s=1.0, refresh_s=0.25)
    for _ in range(200):  # a saturated peer: far fewer replies than the window's count
        recent.record(0.060)
    assert recent.value_s(now=100.0) == pytest.approx(0.060, rel=0.01)
    for _ in range(50):
        recent.record(0.002)
    assert recent.value_s(now=100.1) == pytest.approx(0.060, rel=0.01)  # not yet refreshed
    # Past the refresh, the window holds only the replies since the burst's window was closed.
    assert recent.value_s(now=100.3) == pytest.approx(0.002, rel=0.01)
