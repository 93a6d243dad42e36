"""loadtest.selfbench: the generator's benchmark runs against the hello-world app and prints its table
and its verdict on the target (figures are printed, never asserted: this only checks that the benchmark
works); the verdict's rule on made-up rows."""

from __future__ import annotations

import subprocess
import sys


def test_selfbench_prints_a_row_per_rate_and_worker_count_and_how_to_reproduce_it() -> None:
    argv = ["selfbench", "--rates", "200,400", "--duration", "0.5", "--workers", "1,2", "--connections", "8"]
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", *argv], capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    rows = [line for line in finished.stdout.splitlines() if line.startswith("| ") and "VALID" in line]
    assert [(row.split(" | ")[0], row.split(" | ")[2]) for row in rows] == [
        ("| 200", "1"),
        ("| 400", "1"),
        ("| 200", "2"),
        ("| 400", "2"),
    ]
    assert "generator µs CPU / req" in finished.stdout
    reproduce = "python -m loadtest selfbench --rates 200,400 --duration 0.5 --workers 1,2 --connections 8"
    assert f"Reproduce: `{reproduce}`" in finished.stdout
    assert "**Verdict: not judged: no row asked for 10,000 req/s or more.**" in finished.stdout
