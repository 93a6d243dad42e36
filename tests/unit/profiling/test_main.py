"""``python -m profiling``: compare --quick end to end on its smallest set (its report, the set kept
small, and every page rendered offline in headless Chromium where it is installed), a denied ptrace,
Ctrl-C, and the extras it needs missing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from profiling.cluster import SLOW_REPLICA_DELAY_MS
from profiling.pyspy import MIN_SAMPLES
from profiling.report import GITIGNORE, kept_files

RUNS = ("slow-replica-async-get", "slow-replica-sync-get")
NODE_ONE_FILES = (
    *(f"{kind}.{suffix}" for kind in ("cpu", "idle", "gil") for suffix in ("collapsed.txt", "svg")),
    "memray.bin",
    *(f"alloc-{unit}.{suffix}" for unit in ("count", "bytes") for suffix in ("collapsed.txt", "svg")),
)
KINDS = 5  # cpu, idle, gil, allocations by count and by bytes
KEPT_SUFFIXES = {".md", ".png", ".svg", ".json", ".txt", ""}  # summaries, dumps and .gitignore


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


def test_compare_quick_succeeds_with_progress(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, finished = compare_quick
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "run 1 of 2: slow-replica-async-get (about " in finished.stderr
    assert "phase memray" in finished.stderr
    assert re.search(
        r"without the raw files \(\.gitignore\) the set is \d+ files, [\d.]+ MB\n", finished.stderr
    )
    assert "Traceback" not in finished.stderr


def test_every_artifact_exists(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = compare_quick
    for run in RUNS:
        for name in NODE_ONE_FILES:
            assert (out / run / "n1" / name).stat().st_size > 0, f"{run}/n1/{name}"
        for node in ("n1", "n2", "n3"):
            assert "Thread" in (out / run / node / "dump.txt").read_text(), f"{run}/{node}/dump.txt"
        assert list((out / run / "logs").glob("proxy-*.log")), "n3 behind the delaying proxy"
        manifest = json.loads((out / run / "run.json").read_text())
        assert manifest["spec"]["scenario"] == "slow-replica"
        assert [phase["phase"] for phase in manifest["phases"]] == ["pyspy", "memray"]
        n1 = manifest["nodes"][0]["url"]
        for phase in manifest["phases"]:
            assert phase["load"]["urls"] == [n1]  # every request coordinated by the node profiled
            assert phase["load"]["requests"] > 0
            assert phase["loop_lag_ms"]["n1"]["samples"] > 0
            assert (out / run / phase["load_json"]).exists()
            assert set(phase["cpu_s"]) == {"n1", "n2", "n3"}  # CPU time over the load window, /proc
            assert phase["cpu_s"]["n1"] > 0


def test_the_slow_replica_is_slow(compare_quick: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """Sync asks the replicas one after another: more than 1 % of its reads wait on n3's 20 ms."""
    out, _ = compare_quick
    manifest = json.loads((out / "slow-replica-sync-get" / "run.json").read_text())
    assert manifest["phases"][0]["load"]["latency_ms"]["p99"] >= SLOW_REPLICA_DELAY_MS


def test_svgs_are_readable_flamegraphs_with_samples(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = compare_quick
    svgs = sorted(out.glob("*/n1/*.svg"))
    assert len(svgs) == KINDS * len(RUNS)
    for svg in svgs:
        text = svg.read_text()
        root = ElementTree.fromstring(text.encode())  # well-formed XML with an <svg> root
        assert root.tag.endswith("svg") and root.attrib["width"] == "1200", svg
        title = root.find("{http://www.w3.org/2000/svg}title")
        assert title is not None and title.text is not None
        assert "n1 (coordinator), slow-replica, " in title.text, svg
        if svg.name.startswith("alloc-"):
            assert re.search(r": [\d,]+ (allocations|bytes allocated) over 2 s$", title.text), title.text
        else:
            found = re.search(r": [\d,]+ samples at 500 Hz, ([\d,]+) in Python code", title.text)
            assert found, title.text
            # A quick run's few samples: the page says it is a smoke check.
            assert f"Smoke check: {found.group(1)} samples in Python code (under {MIN_SAMPLES:,})" in text


def test_report_has_both_modes_and_working_links(
    compare_quick: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = compare_quick
    report = (out / "report.md").read_text()
    sections = re.findall(r"^## (.+)$", report, re.M)
    assert sections == [
        "Conclusion",
        "Every run: latency, CPU per request, waits",
        "How the runs were made",
        "Load of each run",
        "slow-replica, GET",
        "py-spy dumps (phase `pyspy`, halfway through the load)",
    ]
    # Seconds a phase: too few clock ticks and samples to compare the modes, and it says so.
    assert report.startswith("# kvnode profiles: a smoke check, too few samples to compare the modes\n")
    opening = report.partition("## Conclusion")[2].partition("\n## ")[0]
    assert re.search(
        r"^- \*\*slow-replica, GET: async and sync not compared: too few samples\*\* "
        r"\(slow-replica-async-get: .*; latency p50 [\d.]+ vs [\d.]+ ms, p99 [\d.]+ vs [\d.]+ ms\.$",
        opening,
        re.M,
    )
    assert "costs the coordinator more" not in opening
    for run in RUNS:  # latency and /proc CPU per request next to the sample counts and their uncertainty
        assert re.search(
            rf"^\| {run} \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d,]+ µs \| [\d,]+ µs \| [\d,]+ µs \| [\d,]+ µs "
            r"\| [\d,]+ \| [\d,]+ \| [\d,]+ \| [\d,]+ \| [\d,]+ ± [\d,]+ µs \| \d+% \| \d+% \|$",
            report,
            re.M,
        ), run
        for phase in ("pyspy", "memray"):
            assert f"| {run} | {phase} |" in report
    assert report.count("| # | async: frame | self | sync: frame | self |") == KINDS
    assert report.count("| # | async: frame | total | sync: frame | total |") == KINDS
    rows = re.findall(
        r"^\| 1 \| `[^`]+` \| [\d.]+% ± [\d.]+% \| `[^`]+` \| [\d.]+% ± [\d.]+% \|$", report, re.M
    )
    assert len(rows) >= KINDS, "first rows filled for both modes, with their uncertainty"
    links = re.findall(r"\]\(([^)]+)\)", report)
    assert any(link.endswith(".svg") for link in links)
    kept = kept_files(out)
    for link in links:
        assert (out / link).resolve() in {path.resolve() for path in kept}, link


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


def test_a_run_without_the_extras_is_refused_in_one_line_naming_the_command_that_installs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As after `make run` (neither extra): in this process, before py-spy or a cluster is looked for."""
    from profiling.__main__ import main

    monkeypatch.setitem(sys.modules, "memray", None)
    assert main(["compare", "--quick", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "profiling: python -m profiling compare needs the load and profile extras (memray is not installed): "
        "install them with `make profile-tools` (that is, .venv/bin/pip install -e '.[load,profile]')\n"
    )
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["report", "--out", str(tmp_path)]) == 2  # a report draws plots: the load extra
    assert (
        "python -m profiling report needs the load extra (matplotlib is not installed)"
        in capsys.readouterr().err
    )
    assert list(tmp_path.iterdir()) == []
