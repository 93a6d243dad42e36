"""``python -m kvnode check --local`` end to end, as a user runs it: its own nodes, a few seconds of the set
and register workloads under faults (kill -9 and restarts; membership changes; as root, partitions between
network namespaces and a full disk), the cluster healed, the history checked: valid, with its report, plots
and history written. The checkers failing on planted defects: tests/unit/kvnode/check/test_runner.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvnode.check.netns import isolation_unavailable
from tests.harness import REPO, Node, clean_env, fresh_key, request

CHECK_S = 120  # the whole command: nodes started, 4-8 s of workload, heal, read back, check, plots


def check_local(out: Path, *args: str, workload: str = "set,register") -> subprocess.CompletedProcess[str]:
    command = ["-m", "kvnode", "check", "--local", "--workload", workload, "--out", str(out), *args]
    return subprocess.run(
        [sys.executable, *command], cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=CHECK_S
    )


def faults_in(report: str) -> list[str]:
    """The kinds of the faults the report's table lists."""
    table = report.split("## Faults", 1)[1].split("##", 1)[0]
    return [
        line.split("|")[1].strip()
        for line in table.splitlines()
        if line.startswith("| ") and "---" not in line
    ][1:]


def assert_valid(
    done: subprocess.CompletedProcess[str], out: Path, checkers: tuple[str, ...] = ("set", "register")
) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    verdicts = [line.split(" (")[0] for line in lines if not line.startswith(("check:", "  "))]
    assert verdicts == [f"{checker}: valid" for checker in checkers], done.stdout
    report = (out / "report.md").read_text()
    assert report.startswith("# kvnode check: valid\n")
    ops = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert {op["type"] for op in ops} >= {"invoke", "ok"}
    assert "set" not in checkers or any(op["f"] == "set-final-read" for op in ops)
    return report


@pytest.mark.slow
def test_a_local_cluster_killed_and_restarted_is_valid_with_its_report(tmp_path: Path) -> None:
    done = check_local(tmp_path, "--time", "4", "--nemesis", "kill", "--seed", "1")
    report = assert_valid(done, tmp_path)
    assert faults_in(report) and set(faults_in(report)) == {"kill"}, report
    assert any(line.startswith("check: ") and " operations (ok " in line for line in done.stdout.splitlines())
    for plot in ("timeline.png", "latency.png", "latency-by-outcome.png"):
        assert (tmp_path / plot).read_bytes()[:4] == b"\x89PNG"
    assert "Run it again (seed 1): `python -m kvnode check --local --workload set,register" in report


@pytest.mark.slow
def test_a_node_that_joins_then_leaves_loses_nothing(tmp_path: Path) -> None:
    done = check_local(tmp_path, "--time", "8", "--nemesis", "membership", "--seed", "2")
    report = assert_valid(done, tmp_path)
    assert faults_in(report)[:1] == ["membership"], report
    assert "| joined |" in report


@pytest.mark.slow
@pytest.mark.skipif(
    bool(isolation_unavailable()), reason=f"partitions and full disks: {isolation_unavailable()}"
)
def test_partitions_and_a_full_disk_as_root(tmp_path: Path) -> None:
    done = check_local(tmp_path, "--time", "6", "--nemesis", "partition,disk", "--seed", "4")
    report = assert_valid(done, tmp_path)
    assert set(faults_in(report)) == {"partition", "disk"}, report
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "kvcheck" not in left  # the namespaces lived in the check's own mount namespace


def test_partitions_without_root_are_said_and_skipped(tmp_path: Path) -> None:
    if not isolation_unavailable():
        pytest.skip("this machine can make partitions: the root test above runs them")
    done = check_local(tmp_path, "--time", "2", "--nemesis", "partition", "--seed", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"check: partition skipped: {isolation_unavailable()}" in done.stdout


def conditional_writes_exist(node: Node) -> bool:
    """Whether the node refuses a second ``If-None-Match: *`` creation of a key (conditional writes, the
    contract's section of that name, are built)."""
    key = fresh_key("conditional")
    answers = [
        request(node.url, "PUT", "/v0/entity", {"id": key}, value, headers={"If-None-Match": "*"}).status
        for value in (b"first", b"second")
    ]
    return answers == [201, 412]


def test_conditional_writes_stay_linearizable_under_kills_and_pauses(node: Node, tmp_path: Path) -> None:
    if not conditional_writes_exist(node):
        pytest.skip("this kvnode has no conditional writes yet: the cas workload has nothing to check")
    args = ("--time", "6", "--nemesis", "kill,pause", "--keys", "2", "--seed", "5")
    report = assert_valid(check_local(tmp_path, *args, workload="cas"), tmp_path, ("cas",))
    assert set(faults_in(report)) == {"kill", "pause"}, report
