"""kvnode.cluster.crash_points: a node started with --crash-at ends at that point as kill -9 would (exit
status 137, nothing after it runs), and passes every other point. Run in a child
Python process, since the point ends the process it is in."""

from __future__ import annotations

from kvnode.cluster import crash_points
from kvnode.cluster.crash_points import CRASH_POINTS


def test_the_points_are_distinct_and_each_is_described() -> None:
    assert len(set(CRASH_POINTS)) == len(CRASH_POINTS)
    described = crash_points.__doc__ or ""
    assert [point for point in CRASH_POINTS if f"``{point}``" not in described] == []
