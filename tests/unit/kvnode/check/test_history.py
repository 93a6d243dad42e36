"""The history: operations recorded with their indices and times, paired into calls by process, written and
read back as Jepsen-shaped JSON lines (another tool's lines, without kvnode's optional fields, read too)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from kvnode.check.history import History, Op, calls, from_line, read_history, to_line, write_history


def test_calls_pair_each_invocation_with_its_processs_next_completion() -> None:
    history = History(clock=itertools.count(0, 10).__next__)
    first = history.invoke(1, "register-write", "k", "a")
    second = history.invoke(2, "register-read", "k")
    history.complete(second, "ok", "a", node="http://n2", status=200)
    history.complete(first, "info", "a", error="timeout")
    pending = history.invoke(3, "register-write", "k", "b")
    found = calls(history.ops)
    assert [(call.index, call.type, call.value) for call in found] == [
        (0, "info", "a"),
        (1, "ok", "a"),
        (4, "info", "b"),
    ]
    assert found[1].latency_ns == 10 and found[1].completed == 20
    assert found[0].completed == math.inf  # an info may take effect any time later
    assert found[2].completion is None and found[2].invoke is pending and found[2].latency_ns is None


def test_lines_round_trip_with_the_optional_fields_only_when_set(tmp_path: Path) -> None:
    ops = [
        Op(0, 3, "invoke", "cas-write", "k", ["a", "b"], 5),
        Op(
            1,
            3,
            "fail",
            "cas-write",
            "k",
            ["a", "b"],
            9,
            node="http://n1",
            status=412,
            error="precondition-failed",
            etag='"7"',
        ),
    ]
    line = {"index": 0, "process": 3, "type": "invoke", "f": "cas-write", "key": "k", "value": ["a", "b"]}
    assert json.loads(to_line(ops[0])) == {**line, "time": 5}
    path = tmp_path / "history.jsonl"
    write_history(ops, path)
    assert read_history(path) == ops


def test_another_tools_lines_are_read_and_a_line_that_is_not_one_is_refused() -> None:
    line = (
        '{"index": 4, "process": 0, "type": "ok", "f": "read", "key": "x", "value": null, "time": 12, "x": 1}'
    )
    assert from_line(line) == Op(4, 0, "ok", "read", "x", None, 12)
    for bad in (
        '{"index": 4}',
        "not json",
        '{"index": 1, "process": 0, "type": "done", "f": "r", "key": "x", "time": 1}',
    ):
        with pytest.raises(ValueError):
            from_line(bad)
