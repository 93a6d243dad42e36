"""The ``register`` workload's checker: a quorum read that starts after a quorum write of its key was
acknowledged never returns an older version of that key. Every write writes a value of its own, so a value
names the write that made it. A pure function of the history.

Versions are compared only where real time orders them, as the contract does: write B is newer than write
A when B started after A was acknowledged. A read returning A's value is **stale** when some write B, newer
than A, was acknowledged before the read started (or, for a read that found nothing, when any write was).
A read of a value no write wrote, or of a write that surely failed, or of one that started only after the
read ended, is **unexpected**. Writes whose outcome is unknown (info) are never known to have finished, so
they make no read stale, and reading them is fine.

>>> from kvnode.check.history import History
>>> h = History(clock=iter(range(0, 100, 10)).__next__)
>>> for value in ("a", "b"):
...     write = h.invoke(0, WRITE, "k", value); _ = h.complete(write, "ok", value)
>>> read = h.invoke(1, READ, "k"); _ = h.complete(read, "ok", "a")
>>> verdict = check_register(h.ops)
>>> verdict.line()
'register: invalid (keys 1, writes 2, acknowledged 2, reads 1, stale 1, unexpected 0)'
>>> verdict.problems[0]
"stale read of k: op 4 (started 0.000 s) returned 'a' (written by op 0), but op 2 wrote 'b' after op 0 \
was acknowledged and was acknowledged itself at 0.000 s"
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence

from kvnode.check.history import Call, Op, calls
from kvnode.check.verdict import Verdict

__all__ = ["OPERATIONS", "READ", "WRITE", "check_register"]

WRITE, READ = "register-write", "register-read"
OPERATIONS = (WRITE, READ)


class _Acknowledged:
    """A key's acknowledged writes by the time they were acknowledged, and for each prefix the write that
    started latest: the newest version known to exist at any moment, as real time orders them."""

    def __init__(self, writes: Sequence[Call]) -> None:
        done = sorted((write for write in writes if write.type == "ok"), key=lambda write: write.completed)
        self._times = [write.completed for write in done]
        self._latest: list[Call] = []
        for write in done:
            latest = self._latest[-1] if self._latest else write
            self._latest.append(write if write.invoked >= latest.invoked else latest)

    def latest_before(self, time: int) -> Call | None:
        """Of the writes acknowledged before ``time``, the one that started last."""
        count = bisect.bisect_left(self._times, time)
        return self._latest[count - 1] if count else None


def check_register(ops: Sequence[Op]) -> Verdict:
    by_key: dict[str, list[Call]] = defaultdict(list)
    for call in calls(op for op in ops if op.f in OPERATIONS):
        by_key[call.key].append(call)
    stale: list[str] = []
    unexpected: list[str] = []
    writes = reads = acknowledged = 0
    for key, key_calls in sorted(by_key.items()):
        key_writes = [call for call in key_calls if call.f == WRITE]
        writes += len(key_writes)
        acknowledged += sum(write.type == "ok" for write in key_writes)
        written = {write.value: write for write in key_writes if isinstance(write.value, str)}
        newest = _Acknowledged(key_writes)
        for read in (call for call in key_calls if call.f == READ and call.type == "ok"):
            reads += 1
            source = written.get(read.value) if isinstance(read.value, str) else None
            problem = _judge(key, read, source, newest)
            if problem.startswith("stale"):
                stale.append(problem)
            elif problem:
                unexpected.append(problem)
    counts = {
        "keys": len(by_key),
        "writes": writes,
        "acknowledged": acknowledged,
        "reads": reads,
        "stale": len(stale),
        "unexpected": len(unexpected),
    }
    if stale or unexpected:
        return Verdict("register", False, counts, [*stale, *unexpected])
    if reads == 0 or acknowledged == 0:
        return Verdict("register", None, counts, ["no read and acknowledged write to compare"])
    return Verdict("register", True, counts)


def _judge(key: str, read: Call, source: Call | None, newest: _Acknowledged) -> str:
    """The one line that says what is wrong with the read; empty for a read that is fine."""
    started = f"op {read.index} (started {read.invoked / 1e9:.3f} s)"
    if read.value is not None and (
        source is None or source.type == "fail" or source.invoked > read.completed
    ):
        why = "no write wrote it" if source is None else f"op {source.index} wrote it ({source.type})"
        return f"unexpected read of {key}: {started} returned {read.value!r}: {why}"
    later = newest.latest_before(read.invoked)
    if later is None:
        return ""
    if source is None:
        return (
            f"stale read of {key}: {started} found nothing, but op {later.index} wrote {later.value!r} and "
            f"was acknowledged at {later.completed / 1e9:.3f} s"
        )
    if later.invoked > source.completed:
        return (
            f"stale read of {key}: {started} returned {read.value!r} (written by op {source.index}), but op "
            f"{later.index} wrote {later.value!r} after op {source.index} was acknowledged and was "
            f"acknowledged itself at {later.completed / 1e9:.3f} s"
        )
    return ""
