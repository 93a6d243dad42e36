"""``python -m profiling``: compare --quick end to end on its smallest set (its report, the set kept
small, and every page rendered offline in headless Chromium where it is installed), a denied ptrace,
and Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from profiling.render_check import find_chromium
from tests.harness import poll, wait_for

RUNS = ("slow-replica-async-get", "slow-replica-sync-get")
KINDS = 5  # cpu, idle, gil, allocations by count and by bytes


@pytest.fixture(scope="module")
def compare_quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The smallest compare that still has both modes and the slow replica's proxy: one scenario, one
    operation (GET, so the fill runs too), seconds a phase."""
    out = tmp_path_factory.mktemp("profiles")
    finished = subprocess.run(
        [sys.executable, "-m", "profiling", "compare", "--quick", "--scenarios", "slow-replica",
         "--ops", "get", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=500,
    )  # fmt: skip
    return out, finished


@pytest.mark.skipif(
    find_chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)
def test_every_page_renders_offline(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = compare_quick
    checked = subprocess.run(
        # One run's pages: every run's are drawn by the same code, and each page takes Chromium seconds.
        [sys.executable, "-m", "profiling.render_check", str(out / RUNS[0])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    pages = KINDS  # a flamegraph of each kind
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
    # Its stderr (with its recorders' and load's) goes to a file: a pipe the test stopped reading filled
    # up on a busy machine and blocked them all, so that Ctrl-C found them stuck in a write.
    said = tmp_path / "stderr.txt"
    with said.open("w") as stderr:
        profiler = subprocess.Popen(
            [sys.executable, "-m", "profiling", "record", "--mode", "async", "--op", "put", "--rate", "50",
             "--duration", "30", "--out", str(out)],
            stderr=stderr,
            text=True,
        )  # fmt: skip
    wait_for(lambda: "phase pyspy" in said.read_text(), 60, "the py-spy phase")
    started = poll(partial(_processes_mentioning, str(out)), _recording_under_load, 30, "recorders and load")
    profiler.send_signal(signal.SIGINT)
    assert profiler.wait(60) == 130, said.read_text()[-3000:]
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
