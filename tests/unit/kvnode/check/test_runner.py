"""A whole check run in the test's process against a stand-in cluster (tests/faulty_servers.py): valid on a
correct one, every workload; invalid, naming the operations, on one that loses acknowledged writes, one that
serves stale reads, one that applies a compare-and-set non-atomically; and the outputs it leaves."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvnode.check.history import calls, read_history
from kvnode.check.linearizable import CAS_CREATE, CAS_DELETE, CAS_WRITE
from kvnode.check.register import READ, WRITE
from kvnode.check.remote import RemoteFaults
from kvnode.check.runner import Options, check
from kvnode.check.set_full import ADD
from kvnode.check.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from tests.faulty_servers import Defect, FaultyServer, serving


def options(out: Path, workloads: Sequence[str], url: str, keys: int = 2) -> Options:
    return Options(
        workloads=workloads,
        nemesis=[],
        time_s=1.5,
        rate=300.0,
        keys=keys,
        out=out,
        seed=7,
        command="python -m kvnode check ...",
        cluster=(url,),
    )


async def run_against(
    defect: Defect, workloads: Sequence[str], out: Path, keys: int = 2
) -> tuple[int, FaultyServer]:
    async with serving(defect) as server:
        status = await check(
            options(out, workloads, server.url, keys), RemoteFaults([server.url], None, None)
        )
    return status, server


def named_ops(report: str) -> list[int]:
    return [int(index) for index in re.findall(r"\bop (\d+)", report)]


async def test_a_correct_cluster_is_valid_on_every_workload_and_leaves_its_report(tmp_path: Path) -> None:
    status, _ = await run_against("", ["set", "register", "cas"], tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert status == EXIT_VALID, report
    assert report.startswith("# kvnode check: valid")
    for checker in ("set", "register", "cas"):
        assert f"| {checker} | valid |" in report
    ops = read_history(tmp_path / "history.jsonl")
    fs = {op.f for op in ops}
    assert {CAS_CREATE, CAS_WRITE, CAS_DELETE, ADD, READ, WRITE} <= fs
    refused = [call for call in calls(ops) if call.error == "precondition-failed"]
    assert refused, "the cas workload never tried a stale version"
    first = json.loads((tmp_path / "history.jsonl").read_text().splitlines()[0])
    assert set(first) >= {"index", "process", "type", "f", "key", "value", "time"}


async def test_a_lost_acknowledged_write_is_found_and_named(tmp_path: Path) -> None:
    status, server = await run_against("lose", ["set"], tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert status == EXIT_INVALID, report
    assert "| set | invalid |" in report
    lost = set(re.findall(r"- lost (\S+): added by op", report))
    assert lost and lost <= server.dropped, (lost, server.dropped)
    ops = read_history(tmp_path / "history.jsonl")
    for index in named_ops(report):
        assert ops[index].key in lost


async def test_a_stale_read_is_found_and_named(tmp_path: Path) -> None:
    status, server = await run_against("stale", ["register"], tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert status == EXIT_INVALID, report
    ops = read_history(tmp_path / "history.jsonl")
    stale = re.findall(r"- stale read of (\S+): op (\d+) \(started [\d.]+ s\) returned '([^']+)'", report)
    assert stale, report
    done = {call.index: call for call in calls(ops)}
    for key, index, value in stale:
        read = done[int(index)]
        assert (read.f, read.key, read.value) == (READ, key, value)
        assert value == server.first[key]  # what the planted replica serves


async def test_a_compare_and_set_applied_non_atomically_is_found_and_named(tmp_path: Path) -> None:
    status, server = await run_against("racy", ["cas"], tmp_path, keys=1)
    report = (tmp_path / "report.md").read_text()
    assert status == EXIT_INVALID, report
    assert server.raced, "no two conditional writes met"
    raced = {value for pair in server.raced for value in pair}
    ops = read_history(tmp_path / "history.jsonl")
    window = [ops[index] for index in named_ops(report)]
    granted = [op for op in window if op.f in (CAS_WRITE, CAS_CREATE) and op.value]
    assert any((op.value[1] if isinstance(op.value, list) else op.value) in raced for op in granted), report


async def test_a_cluster_that_does_not_answer_cannot_be_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with serving() as server:
        url = server.url
    status = await check(options(tmp_path, ["set"], url), RemoteFaults([url], None, None))
    assert status == EXIT_UNKNOWN
    assert "check: cannot run: cannot reach" in capsys.readouterr().out
