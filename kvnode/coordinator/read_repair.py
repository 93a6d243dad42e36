"""Read repair: after a read, the replicas that answered with an older version (or none) get the newest.

One :class:`ReadRound` per client read. It starts each replica's read, keeps every answer (late ones too:
an async read asks all ``from`` replicas and answers at the ``ack``-th), and once the fan-out is over and
every call it started has ended, sends the newest version to each replica that answered with something
older, tombstones included. That happens as the fan-out tells the last call's outcome (the
round's ``ended``, kvnode.coordinator.fanout.Round), after the client's answer is decided, so it never delays
the client.
Every version seen moves the clock past it.
"""

from __future__ import annotations

from collections.abc import Callable

from kvnode.replica import Answered, Replica
from kvnode.replica.errors import ReplicaError
from kvnode.storage.records import Record, newest

__all__ = ["ReadRound"]


class ReadRound:
    """One read's round of a fan-out (kvnode.coordinator.fanout.Round)."""

    __slots__ = ("_answered", "_closed", "_count_repair", "_key", "_observe", "_records", "_running")

    def __init__(
        self, key: bytes, observe: Callable[[int], object], count_repair: Callable[[], None]
    ) -> None:
        self._key = key
        self._observe = observe
        self._count_repair = count_repair
        # The replicas that answered, and what each answered, side by side (no pair built per answer).
        self._answered: list[Replica] = []
        self._records: list[Record | None] = []
        self._running = 0
        self._closed = False

    def start(self, replica: Replica, answered: Answered[Record | None]) -> None:
        """Start one replica's read (a fan-out call), which tells ``answered`` its outcome; ``ended`` is
        to be told it too."""
        self._running += 1
        replica.read_then(self._key, answered)

    def close(self) -> None:
        """The fan-out is over: no more calls will start."""
        self._closed = True
        if not self._running:
            self._repair()

    def ended(self, replica: Replica, error: ReplicaError | None, record: Record | None) -> None:
        """A read that ``start`` started has ended (the fan-out tells this its outcome)."""
        self._running -= 1
        if error is None:
            if record is not None:
                self._observe(record.timestamp)
            self._answered.append(replica)
            self._records.append(record)
        if self._closed and not self._running:
            self._repair()

    def _repair(self) -> None:
        records = self._records
        if len(records) < 2 or records.count(records[0]) == len(records):  # all agree: nearly every read
            return
        winner = newest(records)
        if winner is None:
            return
        for replica, record in zip(self._answered, records, strict=True):
            if record != winner:
                replica.write_then(self._key, winner, _outcome_ignored)
                self._count_repair()


def _outcome_ignored(error: ReplicaError | None, held: int | None) -> None:
    """A repair's outcome does not matter: a failed one is retried by the next read."""
