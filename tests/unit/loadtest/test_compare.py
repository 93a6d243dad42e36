"""loadtest.compare: its progress lines, and ``compare --quick`` end to end (test_report checks the written
conclusion; test_capacity the search, test_replica_calls the counters)."""

from __future__ import annotations

from loadtest.compare import Progress


def test_time_left_only_shrinks() -> None:
    """Work done and planned work dropped both take from what is left; nothing adds to it (the old
    estimate, scaled by the pace so far, went up and down)."""
    progress = Progress(planned=100.0)
    seen = [progress.left]
    for done, dropped in [(6, 0), (10, 0), (0, 30), (10, 0), (4, 40)]:
        progress.advance(done)
        progress.skip(dropped)
        seen.append(progress.left)
    assert seen == [100, 94, 84, 54, 44, 0]
