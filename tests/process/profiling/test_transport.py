"""``python -m profiling.transport``: a short run against its server process prints both transports'
figures for both frame sizes, and their ratios."""

from __future__ import annotations

import re
import subprocess
import sys


def test_a_short_run_prints_each_transport_and_the_ratios() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "profiling.transport", "--batches", "2", "--round-trips", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    out = finished.stdout
    assert "By `python -m profiling.transport --batches 2 --round-trips 20`" in out
    for frame in ("1 call", "16 calls"):
        for transport in ("tcp", "unix"):
            assert re.search(
                rf"^\| {frame} \| {transport} \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", out, re.M
            )
        assert re.search(rf"^\| {frame} \| [\d.]+ \([\d.]+-[\d.]+\)", out, re.M)
