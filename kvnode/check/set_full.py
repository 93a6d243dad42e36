"""The ``set`` workload's checker, Jepsen's set-full for a set whose elements are keys: an element is added by
a PUT of a unique value, maybe removed later by a DELETE, read now and then while the check runs, and read
once more after the cluster healed. A pure function of the history.

- **lost**: added (acknowledged) and not removed (or its removal surely not applied), yet absent from the
  final read; reported with the first read, after the add was acknowledged, that found it missing.
- **resurrected**: removed (acknowledged), yet present in the final read.
- **unexpected**: a value present that was never written, or whose write surely failed.
- **stale**: a read during the run, started after an add (or a removal) was acknowledged, that did not see
  it. Counted, not a violation by itself (only a read with ack + ack > from must see a write; the
  register checker holds the cluster to that).

Invalid if anything is lost, resurrected or unexpected; unknown when no add was acknowledged, or some
element the verdict depends on could not be read back.

>>> from kvnode.check.history import History
>>> h = History(clock=iter(range(0, 100, 10)).__next__)
>>> add = h.invoke(0, ADD, "e1", "v1"); _ = h.complete(add, "ok", "v1")
>>> final = h.invoke(1, FINAL_READ, "e1"); _ = h.complete(final, "ok", None)
>>> verdict = check_set(h.ops)
>>> verdict.line()
'set: invalid (elements 1, acknowledged 1, removed 0, lost 1, resurrected 0, unexpected 0, stale 0, unread 0)'
>>> verdict.problems[0]
'lost e1: added by op 0 (acknowledged at 0.000 s), absent from the final read; first missing: op 2 at 0.000 s'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvnode.check.history import Call, Op, calls
from kvnode.check.verdict import Verdict

__all__ = ["ADD", "FINAL_READ", "OPERATIONS", "READ", "REMOVE", "check_set"]

ADD, REMOVE, READ, FINAL_READ = "set-add", "set-remove", "set-read", "set-final-read"
OPERATIONS = (ADD, REMOVE, READ, FINAL_READ)


@dataclass
class _Element:
    add: Call | None = None
    remove: Call | None = None
    reads: list[Call] = field(default_factory=list)  # every ok read, the final one included
    final: Call | None = None  # the final read that answered


def _seconds(ns: float) -> str:
    return f"{ns / 1e9:.3f} s"


def check_set(ops: Sequence[Op]) -> Verdict:
    elements: dict[str, _Element] = {}
    for call in calls(op for op in ops if op.f in OPERATIONS):
        element = elements.setdefault(call.key, _Element())
        if call.f == ADD:
            element.add = call
        elif call.f == REMOVE:
            element.remove = call
        elif call.type == "ok":
            element.reads.append(call)
            if call.f == FINAL_READ:
                element.final = call
    lost: list[str] = []
    resurrected: list[str] = []
    unexpected: list[str] = []
    stale = unread = 0
    for key, element in sorted(elements.items()):
        add, remove = element.add, element.remove
        if add is None:
            continue  # read, never added: nothing is expected of it (it was never written by this check)
        stale += sum(_stale(read, add, remove) for read in element.reads if read.f == READ)
        present = add.type == "ok" and (remove is None or remove.type == "fail")
        absent = remove is not None and remove.type == "ok"
        final = element.final
        if final is None:
            unread += present or absent
            continue
        seen = final.value
        if seen is not None and (seen != add.value or add.type == "fail"):
            unexpected.append(
                f"unexpected {key}: the final read (op {final.index}) found {seen!r}; "
                f"op {add.index} wrote {add.value!r} ({add.type})"
            )
        elif seen is None and present:
            lost.append(_lost(key, element, add))
        elif seen is not None and absent:
            assert remove is not None
            resurrected.append(
                f"resurrected {key}: removed by op {remove.index} (acknowledged at "
                f"{_seconds(remove.completed)}), present in the final read (op {final.index})"
            )
    added = sum(element.add is not None for element in elements.values())
    acknowledged = sum(e.add is not None and e.add.type == "ok" for e in elements.values())
    removed = sum(e.remove is not None and e.remove.type == "ok" for e in elements.values())
    counts = {
        "elements": added,
        "acknowledged": acknowledged,
        "removed": removed,
        "lost": len(lost),
        "resurrected": len(resurrected),
        "unexpected": len(unexpected),
        "stale": stale,
        "unread": unread,
    }
    problems = [*lost, *resurrected, *unexpected]
    if problems:
        return Verdict("set", False, counts, problems)
    if acknowledged == 0:
        return Verdict("set", None, counts, ["no add was acknowledged: nothing to check"])
    if unread:
        return Verdict("set", None, counts, [f"{unread} elements could not be read back after the run"])
    return Verdict("set", True, counts)


def _stale(read: Call, add: Call, remove: Call | None) -> bool:
    """A read during the run that missed an acknowledged add, or saw an acknowledged removal's element."""
    if remove is not None and remove.type == "ok" and read.invoked > remove.completed:
        return read.value is not None
    removing = remove is not None and remove.type != "fail" and remove.invoked < read.completed
    return add.type == "ok" and read.invoked > add.completed and not removing and read.value is None


def _lost(key: str, element: _Element, add: Call) -> str:
    missing = [read for read in element.reads if read.value is None and read.invoked > add.completed]
    first = min(missing, key=lambda read: read.invoked)
    seen = [read for read in element.reads if read.value is not None]
    last_seen = f"; last seen: op {seen[-1].index}" if seen else ""
    return (
        f"lost {key}: added by op {add.index} (acknowledged at {_seconds(add.completed)}), absent from the "
        f"final read; first missing: op {first.index} at {_seconds(first.invoked)}{last_seen}"
    )
