"""``python -m loadtest wan`` end to end, briefly: the WAN test bed built, both clusters started in it,
every level measured, the report, its JSON and its plot written, and nothing left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvnode.ops.netns import run_ip
from loadtest.netns import unavailable
from loadtest.wan_figures import SHAPES


@pytest.mark.slow
def test_a_short_run_measures_every_level_on_both_clusters_and_writes_its_report(tmp_path: Path) -> None:
    reason = unavailable(delay=True)
    if reason:
        pytest.skip(reason)
    out = tmp_path / "wan"
    argv = ["--duration", "1", "--rate", "40", "--rounds", "1", "--warmup", "0.5", "--keys", "50"]
    with subprocess.Popen(
        [sys.executable, "-m", "loadtest", "wan", *argv, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as bench:  # fmt: skip
        _, said = bench.communicate(timeout=300)
    assert bench.returncode == 0, said[-3000:]
    measured = json.loads((out / "wan.json").read_text())
    cells = [(run["cluster"], run["ack"], run["op"]) for run in measured["runs"]]
    levels = [(shape.name, level) for shape in SHAPES for level in shape.levels]
    assert cells == [(cluster, ack, op) for cluster, ack in levels for op in ("put", "get")]
    assert all(run["requests"] == 40 for run in measured["runs"])
    # Every request answered, bar the odd one a loaded machine timed out (the fill would have failed).
    assert all(run["succeeded"] >= 36 for run in measured["runs"]), measured["runs"]
    by_level = {(run["cluster"], run["ack"], run["op"]): run["latency_ms"] for run in measured["runs"]}
    # What the bed is for, even in a smoke run: quorum across the two waits for the other datacenter.
    assert by_level["2 datacenters", "quorum", "put"]["p50"] >= 50
    assert (
        by_level["2 datacenters", "local_quorum", "put"]["p50"]
        < by_level["2 datacenters", "quorum", "put"]["p50"]
    )
    assert measured["bed"]["across_ms"]["p50"] >= 50 > measured["bed"]["within_ms"]["p50"]
    assert measured["bed"]["delay_line"]["packets"] > 0
    report = (out / "wan.md").read_text()
    assert report.startswith("# Smoke check: ")
    assert (out / "wan-p99.png").stat().st_size > 10_000
    assert not [name for name in run_ip("netns", "list").split() if name.startswith(f"kvwan-{bench.pid}-")]
