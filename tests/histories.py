"""Hand-built histories for the check's checkers (kvnode.check): each operation given whole (its process, when
it started and ended in milliseconds, its outcome), laid out as the history's invocation and completion lines
in time order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvnode.check.history import Op, OpType, Value

_UNSET = object()


@dataclass(frozen=True)
class Planned:
    """One operation: from ``start`` to ``end`` ms (``end`` None: it never completed), its outcome."""

    process: int
    f: str
    key: str
    value: Value
    start: float
    end: float | None
    type: OpType
    result: Value
    error: str


def op(
    process: int,
    f: str,
    key: str,
    value: Value,
    start: float,
    end: float | None,
    type: OpType = "ok",
    result: object = _UNSET,
    error: str = "",
) -> Planned:
    """``result`` is what the completion says (a read's value); by default the invocation's ``value``."""
    said = value if result is _UNSET else result
    return Planned(process, f, key, value, start, end, type, said, error)  # type: ignore[arg-type]


def history(planned: Sequence[Planned]) -> list[Op]:
    """The lines of ``planned`` in time order (an invocation before a completion at the same time)."""
    events = [(item.start, 0, order, item) for order, item in enumerate(planned)]
    events += [(item.end, 1, order, item) for order, item in enumerate(planned) if item.end is not None]
    ops: list[Op] = []
    for time, kind, _, item in sorted(events, key=lambda event: event[:3]):
        ns = round(time * 1_000_000)
        if kind == 0:
            value = None if item.f.endswith("read") else item.value
            ops.append(Op(len(ops), item.process, "invoke", item.f, item.key, value, ns))
        else:
            ops.append(
                Op(len(ops), item.process, item.type, item.f, item.key, item.result, ns, error=item.error)
            )
    return ops


def index_of(ops: Sequence[Op], f: str, key: str, value: Value) -> int:
    """The history index of the invocation of ``f`` on ``key`` with ``value`` (for a read: the first whose
    completion says ``value``)."""
    if f.endswith("read"):
        done = next(o for o in ops if o.f == f and o.key == key and o.type != "invoke" and o.value == value)
        return next(o.index for o in reversed(ops[: done.index]) if o.process == done.process)
    return next(o.index for o in ops if o.type == "invoke" and o.f == f and o.key == key and o.value == value)
