"""The section at saturation (profiling.saturation) on fixed runs: its figures from run.json and the raw
stacks, a row per run, and a conclusion that says where the samples were only when there are enough of
them, a share leading only beyond its uncertainty, and how many samples it rests on."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from profiling.batching import Batching
from profiling.collapsed import NO_PYTHON_FRAME
from profiling.saturation import saturation_conclusion, saturation_run, saturation_table

LOOP = "main;run (uvloop/__init__.py:38);Runner.run (asyncio/runners.py:86)"
AIOHTTP = f"{LOOP};StreamWriter._writelines (aiohttp/http_writer.py:106)"
REQUEST = "RequestHandler._handle_request (aiohttp/web_protocol.py:567)"
HANDLER = f"{LOOP};{REQUEST};get_entity (kvnode/node/client_api.py:110)"
SEND = f"{HANDLER};ClientChannel.send (kvnode/replica/channel/client.py:121)"


def write_run(
    run_dir: Path,
    *,
    kvnode: int,
    aiohttp: int,
    loop: int,
    cpu_s: float = 2.0,
    saturation: bool = True,
) -> dict[str, Any]:
    """A healthy async GET run's run.json and raw stacks: the saturation phase's n1 samples split as
    given (kvnode's: three in four in the replica channel's send, the rest in the handler), 20,000
    requests over a 2 s window."""
    (run_dir / "n1").mkdir(parents=True)
    send = kvnode * 3 // 4
    raw = f"{SEND} {send}\n{HANDLER} {kvnode - send}\n{AIOHTTP} {aiohttp}\n{LOOP} {loop}\n 10\n"
    (run_dir / "n1" / "saturation-cpu.collapsed.txt").write_text(raw)
    pyspy = {"phase": "pyspy", "batching": {"requests": 300, "frames": 600, "calls": 600}}
    phase = {
        "phase": "saturation",
        "load": {"connections": 64, "duration_s": 2, "requests": 19_990, "achieved_rate": 9_995.0,
                 "latency_ms": {"p50": 5.4, "p99": 12.2}},
        "window_s": 2.0,
        "cpu_s": {"n1": cpu_s, "n2": 0.5, "n3": 0.5},
        "batching": {"requests": 20_000, "frames": 1_000, "calls": 40_000},
        "artifacts": [
            {"node": "n1", "kind": "saturation-cpu", "format": fmt, "path": f"n1/saturation-cpu.{suffix}"}
            for fmt, suffix in (("raw", "collapsed.txt"), ("svg", "svg"))
        ],
    }  # fmt: skip
    manifest = {
        "run": "healthy-async-get",
        "sample_rate_hz": 500,
        "spec": {"mode": "async", "op": "get", "scenario": "healthy", "rate": 400},
        "phases": [pyspy, phase] if saturation else [pyspy],
    }
    (run_dir / "run.json").write_text(json.dumps(manifest))
    return manifest


def test_the_figures_come_from_the_coordinators_counts_and_samples(tmp_path: Path) -> None:
    manifest = write_run(tmp_path, kvnode=400, aiohttp=300, loop=290)
    run = saturation_run(tmp_path, manifest)
    assert run is not None
    assert run.requests == 20_000  # n1's own count, not wrk's 19,990
    assert run.cpu_us == pytest.approx(100.0)
    assert run.busy_share == pytest.approx(1.0)
    assert run.batching == Batching(20_000, 1_000, 40_000)
    assert run.batching_at_rate == Batching(300, 600, 600)
    assert run.total_samples == 1_000
    assert dict(run.by_group()) == {"kvnode": 400, "aiohttp": 300, "event loop": 290, NO_PYTHON_FRAME: 10}
    assert run.by_package()["kvnode/replica"] == 300 and run.by_package()["kvnode/node"] == 100
    assert run.flamegraph == tmp_path / "n1" / "saturation-cpu.svg"


def test_a_run_without_the_phase_has_no_figures(tmp_path: Path) -> None:
    assert (
        saturation_run(tmp_path, write_run(tmp_path, kvnode=1, aiohttp=1, loop=1, saturation=False)) is None
    )


def test_a_row_per_run_with_batching_beside_the_constant_rate(tmp_path: Path) -> None:
    run = saturation_run(tmp_path, write_run(tmp_path, kvnode=400, aiohttp=300, loop=290))
    assert run is not None
    header, _, row, _ = saturation_table([run])
    assert header.endswith("| n1 samples | kvnode | aiohttp | event loop | no Python frame |")
    assert row == (
        "| healthy-async-get | 9,995 | 5.4 | 12.2 | 100 µs | 100% | 40.0 | 0.05 | 1.0, 2.00 | 1,000 "
        "| 40.0% ± 2.0% | 30.0% ± 1.7% | 29.0% ± 1.7% | 1.0% ± 0.3% |"
    )


def test_enough_samples_say_where_the_time_went_and_how_many_samples_said_it(tmp_path: Path) -> None:
    run = saturation_run(tmp_path, write_run(tmp_path, kvnode=400, aiohttp=300, loop=290))
    assert run is not None
    (line,) = saturation_conclusion([run])
    assert line.startswith(
        "- **healthy, async GET at saturation**: 9,995 requests/s over 64 connections (p50 5.4 ms, p99 "
        "12.2 ms); n1 CPU 100 µs a request, busy 100% of the 2 s window; 40.0 calls a frame, 0.05 frames "
        "a request (at 400/s: 1.0 and 2.00). Of n1's 1,000 on-CPU samples (2.0 s at 500 Hz, against 2.0 s of "
        "CPU by /proc; shares ± one standard deviation): "
        "kvnode's own frames 40.0% ± 2.0%, aiohttp (with multidict, yarl) 30.0% ± 1.7%, "
    )
    # 400 against 300: a lead of 100, beyond 2 x sqrt(700) = 53
    assert (
        "; kvnode's own frames the largest part, ahead of aiohttp (with multidict, yarl) by more than 2"
        in line
    )
    assert (
        "kvnode's own frames by package: `kvnode/replica` 30.0% ± 1.7%, `kvnode/node` 10.0% ± 1.0%." in line
    )
    assert re.search(
        r"First by self share: `ClientChannel\.send \(kvnode/replica/channel/client\.py:121\)` 30\.0%", line
    )


def test_a_lead_within_the_uncertainty_is_not_claimed(tmp_path: Path) -> None:
    run = saturation_run(tmp_path, write_run(tmp_path, kvnode=370, aiohttp=330, loop=290))
    assert run is not None
    (line,) = saturation_conclusion([run])
    # 370 against 330: a lead of 40, within 2 x sqrt(700) = 53
    assert "kvnode's own frames and aiohttp (with multidict, yarl) not told apart" in line
    assert "the largest part" not in line


@pytest.mark.parametrize(
    ("samples", "cpu_s"),
    [
        ((400, 300, 289), 2.0),  # a sample short of 1,000
        ((400, 300, 290), 0.99),  # a clock tick short of 100
    ],
)
def test_too_few_samples_say_nothing_of_where_the_time_went(
    tmp_path: Path, samples: tuple[int, int, int], cpu_s: float
) -> None:
    kvnode, aiohttp, loop = samples
    run = saturation_run(
        tmp_path, write_run(tmp_path, kvnode=kvnode, aiohttp=aiohttp, loop=loop, cpu_s=cpu_s)
    )
    assert run is not None and run.shortfall is not None
    (line,) = saturation_conclusion([run])
    assert line.startswith("- **healthy, async GET at saturation**, a smoke check: 9,995 requests/s")
    assert line.endswith(f" s at 500 Hz, against {cpu_s:.1f} s of CPU by /proc; one needs 100 and 1,000).")
    assert "No statement on where the time goes from " in line
    assert " ± " not in line and "own frames" not in line and "largest" not in line  # no share said
