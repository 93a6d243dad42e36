"""profiling.counts in this process: without perf the refusal says how to get it. (Its table and perf's
output are its doctests; the command end to end: tests/process/profiling/test_main.py.)"""

from __future__ import annotations

from profiling.counts import perf_refusal


def test_without_perf_the_refusal_says_how_to_install_it() -> None:
    assert perf_refusal(None) == "perf is not installed (apt-get install linux-perf)"
