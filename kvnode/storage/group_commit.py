"""A group commit: the writes of one event-loop iteration, gathered for one LevelDB write, and who waits
to hear that it is done. Pure but for ``offer_soon``, which schedules the commit on the running loop;
the write itself is the caller's (kvnode.storage.keyspace's), so a test can hand in its own.

A write joins the group only if it wins over the version held, pending or stored; a read sees a pending
version; every waiter is told once, after the group's write, of its failure (then the whole group is
told it failed, whatever of it was stored) or of None.

>>> stored = {b"k": Record.put(5, b"stored")}
>>> group = GroupCommit(lambda writes: print("one write of", sorted(writes)), OSError)
>>> group.offer(b"k", Record.put(6, b"new"), lambda key: (stored.get(key), None)).value
b'new'
>>> group.offer(b"k", Record.put(4, b"old"), lambda key: (stored.get(key), None)).value  # loses to pending
b'new'
>>> group.offer(b"j", Record.put(1, b"j"), lambda key: (stored.get(key), None)).value
b'j'
>>> group.wait(lambda failure: print("told", failure))
>>> group.commit()
one write of [b'j', b'k']
told None
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

from kvnode.storage.records import Record, encode

__all__ = ["GroupCommit", "Pending", "Stored", "Waiter", "runs"]

_new_tuple = tuple.__new__

# Told once the group's write is done: None, or the exception it failed with (a StorageError).
Waiter = Callable[[Exception | None], None]
# The stored version of a key a write competes with, and its bytes (kvnode.storage.keyspace.Storage._current).
Stored = Callable[[bytes], tuple[Record | None, bytes | None]]


class Pending(NamedTuple):
    """A write waiting for its group's commit: the record, its bytes, and the stored bytes it replaces
    (None: none), which storage's change listener is told with it."""

    record: Record
    encoded: bytes
    replaced: bytes | None


class GroupCommit:
    """The pending writes and their waiters, until ``commit`` hands them to ``write`` (which raises the
    failure of the one write they make, or stores them all). ``logged``: the exception ``write`` raises
    for a failure it has logged already, which a scheduled commit need not report again."""

    __slots__ = ("_logged", "_scheduled", "_waiters", "_write", "writes")

    def __init__(self, write: Callable[[dict[bytes, Pending]], None], logged: type[Exception]) -> None:
        self._write = write
        self._logged = logged
        self.writes: dict[bytes, Pending] = {}
        self._waiters: list[Waiter] = []
        self._scheduled = False

    def offer(self, key: bytes, record: Record, stored: Stored, encoded: bytes | None = None) -> Record:
        """Add record to the group unless the version held, pending or else ``stored``, wins over it;
        the version held afterwards. ``encoded``: its bytes (records.encode), when the caller has them."""
        pending = self.writes.get(key)
        current, replaced = stored(key) if pending is None else (pending.record, pending.replaced)
        if current is not None and current >= record:
            return current
        encoded = encode(record) if encoded is None else encoded
        self.writes[key] = _new_tuple(Pending, (record, encoded, replaced))  # no Python __new__
        return record

    def offer_soon(self, key: bytes, record: Record, stored: Stored, encoded: bytes | None = None) -> Record:
        """``offer``, and the group committed once this loop iteration's callbacks have run (call_soon
        runs after them, so every write made in the iteration joins)."""
        held = self.offer(key, record, stored, encoded)
        if self.writes and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._commit_soon)
        return held

    def wait(self, waiter: Waiter) -> None:
        """Tell waiter once the pending writes are written or failed; at once when none is pending."""
        if self.writes:
            self._waiters.append(waiter)
        else:
            waiter(None)

    def commit(self) -> None:
        """Write the pending writes (one write), then tell their waiters; raise the write's failure."""
        writes, waiters = self.writes, self._waiters
        self.writes, self._waiters = {}, []
        failure: Exception | None = None
        if writes:
            try:
                self._write(writes)
            except Exception as error:  # told to every waiter (none may hang), then raised
                failure = error
        for waiter in waiters:
            waiter(failure)
        if failure is not None:
            raise failure

    def _commit_soon(self) -> None:
        self._scheduled = False
        # Every waiter is told of a failure, and storage logged it; anything else reaches the loop's handler.
        with contextlib.suppress(self._logged):
            self.commit()


def runs(writes: dict[bytes, Pending], max_bytes: int) -> Iterator[list[tuple[bytes, Pending]]]:
    """The writes in order, in runs of at most ``max_bytes`` (keys and records), or of one larger write:
    a group is stored by one write per run.

    >>> writes = {key: Pending(Record.put(1, b"v" * size), b"x" * size, None) for key, size in
    ...           ((b"a", 40), (b"b", 40), (b"c", 200), (b"d", 10))}
    >>> [[key for key, _ in run] for run in runs(writes, 100)]
    [[b'a', b'b'], [b'c'], [b'd']]
    """
    run: list[tuple[bytes, Pending]] = []
    size = 0
    for key, pending in writes.items():
        length = len(key) + len(pending.encoded)
        if run and size + length > max_bytes:
            yield run
            run, size = [], 0
        run.append((key, pending))
        size += length
    if run:
        yield run
