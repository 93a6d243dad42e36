"""``python -m profiling``: compare --quick end to end (its report, and every page rendered offline in
headless Chromium where it is installed), a denied ptrace, and Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from functools import partial
from pathlib import Path

import pytest

from profiling.pyspy import MIN_SAMPLES
from profiling.render_check import find_chromium
from tests.harness import poll, wait_for

RUNS = ("async-put", "sync-put", "async-get", "sync-get")
NODE_ONE_FILES = (
    "cpu.svg",
    "cpu.speedscope.json",
    "cpu.collapsed.txt",
    "idle.svg",
    "idle.collapsed.txt",
    "gil.svg",
    "gil.collapsed.txt",
    "memray.bin",
    "memray-temporary.html",
    "memray-peak.html",  # quick mode too: the README promises it
    "alloc-count.collapsed.txt",
    "alloc-bytes.collapsed.txt",
)


@pytest.fixture(scope="module")
def compare_quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("profiles")
    finished = subprocess.run(
        [sys.executable, "-m", "profiling", "compare", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=290,
    )
    return out, finished


def test_compare_quick_succeeds_with_progress(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, finished = compare_quick
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "phase memray" in finished.stderr
    assert "Traceback" not in finished.stderr


def test_every_artifact_exists(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = compare_quick
    for run in RUNS:
        for name in NODE_ONE_FILES:
            assert (out / run / "n1" / name).stat().st_size > 0, f"{run}/n1/{name}"
        for node in ("n1", "n2", "n3"):
            assert "Thread" in (out / run / node / "dump.txt").read_text(), f"{run}/{node}/dump.txt"
        manifest = json.loads((out / run / "run.json").read_text())
        assert [phase["phase"] for phase in manifest["phases"]] == ["cpu", "idle", "gil", "memray"]
        for phase in manifest["phases"]:
            assert phase["load"]["requests"] > 0
            assert phase["loop_lag_ms"]["n1"]["samples"] > 0
            assert (out / run / phase["load_json"]).exists()
            assert set(phase["cpu_s"]) == {"n1", "n2", "n3"}  # CPU time over the load window, /proc
            assert phase["cpu_s"]["n1"] > 0


def test_svgs_are_flamegraphs_with_samples(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = compare_quick
    svgs = sorted(out.glob("*/n1/*.svg"))
    assert len(svgs) == 3 * len(RUNS)
    for svg in svgs:
        text = svg.read_text()
        root = ElementTree.fromstring(text.encode())  # well-formed XML with an <svg> root
        assert root.tag.endswith("svg"), svg
        samples = [int(n.replace(",", "")) for n in re.findall(r"<title>[^<]*\(([\d,]+) samples?, ", text)]
        assert samples and max(samples) > 0, f"{svg} has no sampled frames"
        # A quick run's few samples leave every frame too narrow for its label: the page says why.
        if max(samples) < MIN_SAMPLES:
            assert f"Smoke check: {max(samples):,} samples (under {MIN_SAMPLES:,})" in text, svg


def test_report_has_both_modes_and_working_links(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = compare_quick
    report = (out / "report.md").read_text()
    sections = re.findall(r"^## (.+)$", report, re.M)
    assert sections[:2] == ["Conclusion", "CPU per request: /proc next to the samples"]
    # Three seconds a phase: too few clock ticks and samples to compare the modes, and it says so.
    assert report.startswith("# kvnode profiles: a smoke check, too few samples to compare the modes\n")
    opening = report.partition("## Conclusion")[2].partition("\n## ")[0]
    for op in ("PUT", "GET"):
        assert re.search(
            rf"^- \*\*{op}: async and sync not compared: too few samples\*\* \(async-", opening, re.M
        )
    assert "costs the coordinator more" not in opening
    for run in RUNS:  # /proc CPU per request next to the sample counts, for every run
        assert re.search(
            rf"^\| {run} \| [\d,]+ \| [\d,]+ µs \| [\d,]+ µs \| [\d,]+ µs \| [\d,]+ µs \| \d", report, re.M
        )
    assert "(cpu-per-request.png)" in report
    for run in RUNS:
        for phase in ("cpu", "idle", "gil", "memray"):
            assert f"| {run} | {phase} |" in report
    assert report.count("| # | async: frame | self | sync: frame | self |") == 2 * 5  # PUT, GET x 5 kinds
    assert report.count("| # | async: frame | total | sync: frame | total |") == 2 * 5
    rows = re.findall(r"^\| 1 \| `[^`]+` \| [\d.]+% \| `[^`]+` \| [\d.]+% \|$", report, re.M)
    assert len(rows) >= 2 * 5, "first rows filled for both modes"
    links = re.findall(r"\]\(([^)]+)\)", report)
    assert any(link.endswith(".svg") for link in links) and any(link.endswith(".html") for link in links)
    for link in links:
        assert (out / link).exists(), link


@pytest.mark.skipif(
    find_chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)
def test_every_page_renders_offline(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = compare_quick
    checked = subprocess.run(
        [sys.executable, "-m", "profiling.render_check", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    pages = len(RUNS) * (3 + 2)  # per run: cpu, idle, gil flamegraphs; memray temporary and peak
    assert f"{pages} of {pages} pages drew offline" in checked.stdout


def test_no_ptrace_rights_is_exit_2_with_advice(tmp_path: Path) -> None:
    fake = tmp_path / "py-spy"
    fake.write_text(
        '#!/bin/sh\necho "Permission Denied: Try running again with elevated permissions" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    finished = subprocess.run(
        [sys.executable, "-m", "profiling", "record", "--mode", "async", "--op", "put",
         "--out", str(tmp_path / "o"), "--py-spy", str(fake)],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert finished.returncode == 2
    assert "SYS_PTRACE" in finished.stderr and "ptrace_scope" in finished.stderr
    assert "Traceback" not in finished.stderr


def _processes_mentioning(text: str) -> dict[int, str]:
    """Every other process whose command line mentions ``text``: its PID and command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and int(entry.name) != os.getpid():
                found[int(entry.name)] = cmdline
    return found


def _recording_under_load(processes: dict[int, str]) -> bool:
    """A py-spy recorder and the load generator both running: the profile's steady state."""
    commands = processes.values()
    return any("py-spy" in c for c in commands) and any("loadtest" in c for c in commands)


def test_ctrl_c_stops_every_process_started(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    profiler = subprocess.Popen(
        [sys.executable, "-m", "profiling", "record", "--mode", "async", "--op", "put", "--rate", "50",
         "--duration", "30", "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert profiler.stderr is not None
    deadline = time.monotonic() + 60
    for line in profiler.stderr:
        if "phase cpu" in line or time.monotonic() > deadline:
            break
    started = poll(partial(_processes_mentioning, str(out)), _recording_under_load, 30, "recorders and load")
    profiler.send_signal(signal.SIGINT)
    assert profiler.wait(60) == 130
    wait_for(
        lambda: not [pid for pid in started if Path(f"/proc/{pid}").exists()], 10, "the recorders to end"
    )
    assert not _processes_mentioning(str(out))


def test_report_rewrites_from_the_runs(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = compare_quick
    before = (out / "report.md").read_text()
    (out / "report.md").unlink()
    finished = subprocess.run(
        [sys.executable, "-m", "profiling", "report", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stderr
    after = (out / "report.md").read_text()

    def undated(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Written ")]

    assert undated(after) == undated(before)  # all but the line with the date and command
