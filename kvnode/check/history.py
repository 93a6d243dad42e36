"""A check's history, as Jepsen records one: every operation's invocation and its completion, one JSON object
a line (``index``, ``process``, ``type`` = invoke, ok, fail or info, ``f``, ``key``, ``value``, ``time`` in
nanoseconds since the check began), plus what the client saw where there is something: the ``node`` asked,
the HTTP ``status``, an ``error`` and the version's ``etag``. A process has one operation in flight at a
time; an ``info`` completion (the outcome is unknown) ends that process, and the next operation of its
worker comes from a new one, as in Jepsen.

>>> recorder = History(clock=iter([10, 25]).__next__)
>>> call = recorder.invoke(3, "register-write", "k1", "3.0")
>>> done = recorder.complete(call, "ok", "3.0", node="http://127.0.0.1:8080", status=201)
>>> to_line(done)
'{"index": 1, "process": 3, "type": "ok", "f": "register-write", "key": "k1", "value": "3.0", "time": 25, \
"node": "http://127.0.0.1:8080", "status": 201}'
>>> [(pair.invoke.index, pair.type, pair.latency_ns) for pair in calls(recorder.ops)]
[(0, 'ok', 15)]
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "Call",
    "History",
    "Op",
    "OpType",
    "Value",
    "calls",
    "from_line",
    "read_history",
    "to_line",
    "write_history",
]

OpType = Literal["invoke", "ok", "fail", "info"]
# A value as the history keeps it: text (each written value is unique), None (absent), or a list of them
# (a compare-and-set's [expected, new]).
Value = str | None | list[str | None]
_OPTIONAL = ("node", "status", "error", "etag")


@dataclass(frozen=True, slots=True)
class Op:
    """One line of the history: an invocation or a completion."""

    index: int
    process: int
    type: OpType
    f: str
    key: str
    value: Value
    time: int
    node: str = ""
    status: int | None = None
    error: str = ""
    etag: str = ""


@dataclass(frozen=True, slots=True)
class Call:
    """An operation whole: its invocation and its completion (None if it never completed)."""

    invoke: Op
    completion: Op | None

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def key(self) -> str:
        return self.invoke.key

    @property
    def type(self) -> OpType:
        """ok, fail or info; info when it never completed (its outcome is unknown)."""
        return "info" if self.completion is None else self.completion.type

    @property
    def value(self) -> Value:
        """What it wrote (its invocation's value), or for a read what it read (its completion's)."""
        return self.invoke.value if self.completion is None else self.completion.value

    @property
    def invoked(self) -> int:
        return self.invoke.time

    @property
    def completed(self) -> float:
        """When it is known to have finished: +inf for an info (it may take effect at any later time)."""
        if self.completion is None or self.completion.type == "info":
            return math.inf
        return self.completion.time

    @property
    def latency_ns(self) -> int | None:
        return None if self.completion is None else self.completion.time - self.invoke.time

    @property
    def index(self) -> int:
        return self.invoke.index

    @property
    def error(self) -> str:
        return "" if self.completion is None else self.completion.error


class History:
    """Records operations as they happen: indices in order, times from ``clock`` (nanoseconds, the check's
    start being 0)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.ops: list[Op] = []
        self._clock = clock

    def now(self) -> int:
        """Nanoseconds since the check began, by the history's clock."""
        return self._clock()

    def invoke(self, process: int, f: str, key: str, value: Value = None) -> Op:
        return self._add(Op(len(self.ops), process, "invoke", f, key, value, self._clock()))

    def complete(self, invocation: Op, type: OpType, value: Value, **seen: Any) -> Op:
        """The completion of ``invocation``; ``seen``: node, status, error, etag."""
        return self._add(
            Op(
                len(self.ops),
                invocation.process,
                type,
                invocation.f,
                invocation.key,
                value,
                self._clock(),
                **seen,
            )
        )

    def _add(self, op: Op) -> Op:
        self.ops.append(op)
        return op


def calls(ops: Iterable[Op]) -> list[Call]:
    """Each invocation with its completion (the process's next op), in the order of invocation."""
    pending: dict[int, Op] = {}
    found: dict[int, Call] = {}
    for op in ops:
        if op.type == "invoke":
            pending[op.process] = op
            found[op.index] = Call(op, None)
        elif op.process in pending:
            invocation = pending.pop(op.process)
            found[invocation.index] = Call(invocation, op)
    return [found[index] for index in sorted(found)]


def to_line(op: Op) -> str:
    """The op as one JSON object; the optional fields only when set."""
    record: dict[str, Any] = {
        "index": op.index,
        "process": op.process,
        "type": op.type,
        "f": op.f,
        "key": op.key,
        "value": op.value,
        "time": op.time,
    }
    for name in _OPTIONAL:
        if getattr(op, name) not in ("", None):
            record[name] = getattr(op, name)
    return json.dumps(record)


def from_line(line: str) -> Op:
    """An op from one JSON line (as :func:`to_line` writes, or as another tool does with the same fields);
    ValueError when it is not one."""
    try:
        record = json.loads(line)
        return Op(
            index=int(record["index"]),
            process=int(record["process"]),
            type=_op_type(record["type"]),
            f=str(record["f"]),
            key=str(record["key"]),
            value=record.get("value"),
            time=int(record["time"]),
            **{name: record[name] for name in _OPTIONAL if name in record},
        )
    except (KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"not a history line ({error!r}): {line.strip()[:200]}") from None


def _op_type(text: object) -> OpType:
    if text not in ("invoke", "ok", "fail", "info"):
        raise ValueError(f"type must be invoke, ok, fail or info, got {text!r}")
    return text


def write_history(ops: Sequence[Op], path: Path) -> None:
    path.write_text("".join(to_line(op) + "\n" for op in ops))


def read_history(path: Path) -> list[Op]:
    return [from_line(line) for line in path.read_text().splitlines() if line.strip()]
