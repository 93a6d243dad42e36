"""``python -m profiling``: compare --quick end to end on its smallest set that has every phase (its
report, the section at saturation parsed, the set kept small, and every page rendered offline in headless
Chromium where it is installed), a denied ptrace, Ctrl-C, and counts on a small load."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from functools import partial
from pathlib import Path

import pytest

from profiling.cluster import SLOW_REPLICA_DELAY_MS
from profiling.pyspy import MIN_SAMPLES
from profiling.render_check import find_chromium
from profiling.report import GITIGNORE, kept_files
from tests.harness import poll, wait_for

HEALTHY = ("healthy-async-get", "healthy-sync-get")  # with a saturation phase
SLOW = ("slow-replica-async-get", "slow-replica-sync-get")
RUNS = (*HEALTHY, *SLOW)
KINDS = 5  # cpu, idle, gil, allocations by count and by bytes
SATURATION_KINDS = 1  # cpu at saturation, in the healthy runs


@pytest.fixture(scope="module")
def compare_quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The smallest compare that still has both modes, the saturation phase (healthy runs) and the slow
    replica's proxy: both scenarios, one operation (GET, so the fill runs too), seconds a phase."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install wrk): the saturation phase runs it")
    out = tmp_path_factory.mktemp("profiles")
    finished = subprocess.run(
        [sys.executable, "-m", "profiling", "compare", "--quick", "--scenarios", "healthy,slow-replica",
         "--ops", "get", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=500,
    )  # fmt: skip
    return out, finished


@pytest.mark.skipif(
    find_chromium() is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)
@pytest.mark.slow
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
    pages = KINDS + SATURATION_KINDS  # a flamegraph of each kind
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
             "--duration", "30", "--saturation-duration", "0", "--out", str(out)],
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


@pytest.mark.slow
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


NODE_ONE_FILES = (
    *(f"{kind}.{suffix}" for kind in ("cpu", "idle", "gil") for suffix in ("collapsed.txt", "svg")),
    "memray.bin",
    *(f"alloc-{unit}.{suffix}" for unit in ("count", "bytes") for suffix in ("collapsed.txt", "svg")),
)
SATURATION_FILES = ("saturation-cpu.collapsed.txt", "saturation-cpu.svg")


KEPT_SUFFIXES = {".md", ".png", ".svg", ".json", ".txt", ""}  # summaries, dumps and .gitignore


@pytest.mark.slow
def test_compare_quick_succeeds_with_progress(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, finished = compare_quick
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "run 1 of 4: healthy-async-get (about " in finished.stderr
    assert "run 3 of 4: slow-replica-async-get (about " in finished.stderr
    assert "healthy-sync-get: phase saturation: a closed loop of 64 connections for 2 s" in finished.stderr
    assert "slow-replica-async-get: phase saturation" not in finished.stderr  # the healthy cluster's only
    assert "phase memray" in finished.stderr
    assert re.search(
        r"without the raw files \(\.gitignore\) the set is \d+ files, [\d.]+ MB\n", finished.stderr
    )
    assert "Traceback" not in finished.stderr


@pytest.mark.slow
def test_every_artifact_exists(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = compare_quick
    for run in RUNS:
        healthy = run in HEALTHY
        for name in (*NODE_ONE_FILES, *(SATURATION_FILES if healthy else ())):
            assert (out / run / "n1" / name).stat().st_size > 0, f"{run}/n1/{name}"
        for node in ("n1", "n2", "n3"):
            assert "Thread" in (out / run / node / "dump.txt").read_text(), f"{run}/{node}/dump.txt"
        proxied = list((out / run / "logs").glob("proxy-*.log"))
        assert bool(proxied) != healthy, "n3 behind the delaying proxy in the slow-replica runs only"
        manifest = json.loads((out / run / "run.json").read_text())
        assert manifest["spec"]["scenario"] == ("healthy" if healthy else "slow-replica")
        phases = ["pyspy", "saturation", "memray"] if healthy else ["pyspy", "memray"]
        assert [phase["phase"] for phase in manifest["phases"]] == phases
        n1 = manifest["nodes"][0]["url"]
        for phase in manifest["phases"]:
            assert phase["load"]["urls"] == [n1]  # every request coordinated by the node profiled
            assert phase["load"]["requests"] > 0
            assert phase["loop_lag_ms"]["n1"]["samples"] > 0
            assert (out / run / phase["load_json"]).exists()
            assert set(phase["cpu_s"]) == {"n1", "n2", "n3"}  # CPU time over the load window, /proc
            assert phase["cpu_s"]["n1"] > 0
            # n1's /metrics around the load: every request it answered, and its calls to the peers
            batching = phase["batching"]
            assert batching["requests"] >= phase["load"]["requests"]  # wrk leaves its last answers uncounted
            assert 0 < batching["frames"] <= batching["calls"] <= 2 * batching["requests"] + 10


@pytest.mark.slow
def test_the_slow_replica_is_slow(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """Sync asks the replicas one after another: more than 1 % of its reads wait on n3's 20 ms."""
    out, _ = compare_quick
    manifest = json.loads((out / "slow-replica-sync-get" / "run.json").read_text())
    assert manifest["phases"][0]["load"]["latency_ms"]["p99"] >= SLOW_REPLICA_DELAY_MS


@pytest.mark.slow
def test_svgs_are_readable_flamegraphs_with_samples(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = compare_quick
    svgs = sorted(out.glob("*/n1/*.svg"))
    assert len(svgs) == KINDS * len(RUNS) + SATURATION_KINDS * len(HEALTHY)
    for svg in svgs:
        text = svg.read_text()
        root = ElementTree.fromstring(text.encode())  # well-formed XML with an <svg> root
        assert root.tag.endswith("svg") and root.attrib["width"] == "1200", svg
        title = root.find("{http://www.w3.org/2000/svg}title")
        assert title is not None and title.text is not None
        scenario = "healthy" if svg.parent.parent.name in HEALTHY else "slow-replica"
        assert f"n1 (coordinator), {scenario}, " in title.text, svg
        if svg.name.startswith("saturation-"):
            assert "GET at saturation (64 connections)" in title.text, title.text
        if svg.name.startswith("alloc-"):
            assert re.search(r": [\d,]+ (allocations|bytes allocated) over 2 s$", title.text), title.text
        else:
            found = re.search(r": [\d,]+ samples at 500 Hz, ([\d,]+) in Python code", title.text)
            assert found, title.text
            # A quick run's few samples: the page says it is a smoke check.
            assert f"Smoke check: {found.group(1)} samples in Python code (under {MIN_SAMPLES:,})" in text


@pytest.mark.slow
def test_report_has_both_modes_and_working_links(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = compare_quick
    report = (out / "report.md").read_text()
    sections = re.findall(r"^## (.+)$", report, re.M)
    assert sections == [
        "Conclusion",
        "At saturation",
        "Every run: latency, CPU per request, waits",
        "How the runs were made",
        "Load of each run",
        "healthy, GET",
        "slow-replica, GET",
        "py-spy dumps (phase `pyspy`, halfway through the load)",
    ]
    # Seconds a phase: too few clock ticks and samples to compare the modes, and it says so.
    assert report.startswith("# kvnode profiles: a smoke check, too few samples to compare the modes\n")
    opening = report.partition("## Conclusion")[2].partition("\n## ")[0]
    for scenario in ("healthy", "slow-replica"):
        assert re.search(
            rf"^- \*\*{scenario}, GET: async and sync not compared: too few samples\*\* "
            rf"\({scenario}-async-get: .*; latency p50 [\d.]+ vs [\d.]+ ms, p99 [\d.]+ vs [\d.]+ ms\.$",
            opening,
            re.M,
        ), scenario
    assert "costs the coordinator more" not in opening
    for run in RUNS:  # latency and /proc CPU per request next to the sample counts and their uncertainty
        assert re.search(
            rf"^\| {run} \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d,]+ µs \| [\d,]+ µs \| [\d,]+ µs \| [\d,]+ µs "
            r"\| [\d,]+ \| [\d,]+ \| [\d,]+ \| [\d,]+ \| [\d,]+ ± [\d,]+ µs \| \d+% \| \d+% \|$",
            report,
            re.M,
        ), run
        for phase in ("pyspy", "saturation", "memray") if run in HEALTHY else ("pyspy", "memray"):
            assert f"| {run} | {phase} |" in report
    assert "| slow-replica-async-get | saturation |" not in report
    groups = len(RUNS) // 2
    # the phases' tables, and at saturation its functions' and its packages'
    assert report.count("| # | async: frame | self | sync: frame | self |") == KINDS * groups + 1
    assert report.count("| # | async: frame | total | sync: frame | total |") == KINDS * groups
    assert report.count("| # | async: package | self | sync: package | self |") == 1
    rows = re.findall(
        r"^\| 1 \| `[^`]+` \| [\d.]+% ± [\d.]+% \| `[^`]+` \| [\d.]+% ± [\d.]+% \|$", report, re.M
    )
    assert len(rows) >= KINDS * groups + 2, "first rows filled for both modes, with their uncertainty"
    links = re.findall(r"\]\(([^)]+)\)", report)
    assert any(link.endswith(".svg") for link in links)
    kept = kept_files(out)
    for link in links:
        assert (out / link).resolve() in {path.resolve() for path in kept}, link


@pytest.mark.slow
def test_the_section_at_saturation_has_a_row_and_a_conclusion_per_healthy_run(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = compare_quick
    section = (out / "report.md").read_text().partition("\n## At saturation\n")[2].partition("\n## ")[0]
    assert "(`wrk -t1 -c64`, as `make bench --no-spread` loads the coordinator)" in section
    assert "sends every request to n1 for 2 s" in section
    share = r"[\d.]+% ± [\d.]+%"
    for mode in ("async", "sync"):
        run = f"healthy-{mode}-get"
        # wrk's throughput and latency, n1's CPU per request and busy share by /proc, its calls per frame
        # and frames per request at saturation and at the constant rate, its samples and their shares
        row = re.search(
            rf"^\| {run} \| ([\d,]+) \| [\d.]+ \| [\d.]+ \| [\d,]+ µs \| \d+% \| ([\d,.]+) \| ([\d.]+) "
            rf"\| 1\.0, [\d.]+ \| ([\d,]+) \| {share} \| {share} \| {share} \|",
            section,
            re.M,
        )
        assert row, run
        rate, calls_per_frame, frames_per_request, samples = row.groups()
        # 64 requests at a time: a tick's calls leave together, so frames carry several calls each, where
        # at the constant rate each call left alone (1.0 a frame, above)
        assert float(calls_per_frame.replace(",", "")) > 1 and float(frames_per_request) < 2
        head = rf"^- \*\*healthy, {mode} GET at saturation\*\*(, a smoke check)?: "
        said = re.search(rf"{head}{rate} requests/s over 64 connections .*$", section, re.M)
        assert said, mode
        if said.group(1):  # seconds a phase: nothing said of where the time went, and why
            assert re.search(rf"No statement on where the time goes from [\d,]+ clock ticks of n1 CPU and "
                             rf"{samples} samples \([\d.]+ s at 500 Hz, against [\d.]+ s of CPU by /proc; "
                             r"one needs 100 and 1,000\)\.$", said.group(0))  # fmt: skip
        else:
            assert f"Of n1's {samples} on-CPU samples (" in said.group(0)
        assert f"[flamegraph]({run}/n1/saturation-cpu.svg)" in section
    assert "\n### healthy, GET at saturation: n1 (coordinator), phase `saturation`\n" in section
    assert re.search(rf"^\| 1 \| `[^`]+` \| {share} \| `[^`]+` \| {share} \|$", section, re.M)


@pytest.mark.slow
def test_raw_files_stay_out_of_git(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """What a checked-in set keeps is summaries and flamegraphs; captures, raw stacks and logs are
    ignored, and each flamegraph is small."""
    out, _ = compare_quick
    assert (out / ".gitignore").read_text() == GITIGNORE  # git leaves out what kept_files leaves out
    kept = kept_files(out)
    assert {path.suffix for path in kept} <= KEPT_SUFFIXES
    assert not [path for path in kept if path.name.endswith((".collapsed.txt", ".bin", ".log"))]
    assert not [path for path in kept if "logs" in path.parts]
    assert (out / RUNS[0] / "n1" / "memray.bin").exists()  # kept beside the set, to re-read
    assert all(path.stat().st_size < 200_000 for path in kept if path.suffix == ".svg")


@pytest.mark.slow
def test_counts_prints_the_counts_per_request_of_a_bounded_load(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "profiling", "counts", "--ops", "put", "--requests", "300",
         "--connections", "8", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    table = (tmp_path / "counts.md").read_text()
    assert table.strip() == finished.stdout.strip()
    rows = dict(re.findall(r"^\| (.+?) \| (.+?) \|$", table, re.MULTILINE))
    assert rows["answers"] == "201: 900"  # three phases, every PUT answered
    assert 50 < float(rows["Python calls at a node of one (cProfile)"].replace(",", "")) < 5_000
    assert float(rows["&nbsp; kvnode/node"]) >= 1  # the entity handler, at least
    assert 100 < float(rows["allocations (memray)"].replace(",", "")) < 10_000
    # Each PUT writes to both peers: at most one frame a call, and at least one call a frame.
    assert 0 < float(rows["frames sent to peers"]) <= 2
    assert (
        float(rows["calls per frame sent"]) >= 1 and float(rows["calls per frame answered (the peers)"]) >= 1
    )
    assert rows["system calls (perf)"] != "-" or "no system calls counted" in table
