"""The replica protocol: its versions, and its calls as one table (:data:`PROTOCOL`).

A node speaks a range of protocol versions, MIN_VERSION to CURRENT_VERSION (fewer with ``--max-protocol``,
for rolling upgrades and tests); each end of a replica channel says its range in the handshake
(kvnode.replica.auth) and both use the highest version in both ranges (:func:`negotiate`), so a cluster
upgrades one node at a time. No common version refuses the connection. A node that says no range is a
kvnode from before versions were negotiated: it speaks version 1 only.

    >>> negotiate(Versions(1, 2), Versions(1, 1)), negotiate(Versions(1, 2), Versions(1, 2))
    (1, 2)
    >>> negotiate(Versions(2, 2), Versions(1, 1)) is None
    True
    >>> sorted(op.name for op in ops_of(2) - ops_of(1))
    ['DELETE']

Versions: 1, every op but DELETE; 2 adds DELETE (a delete as its timestamp and replica count:
kvnode.replica.wire.encode_delete), which a peer sends in place of a tombstone's WRITE once the channel
speaks 2, and a server refuses on a channel that speaks 1 as an unknown op. 3 adds clock pings: a ping that
carries the pinger's wall clock (8 bytes) is answered by a pong that carries them back followed by a CLOCK
reply's payload, so the heartbeat measures the peer's clock (kvnode.replica.clock_probe) where a channel
that speaks 2 or 1 makes a CLOCK call.

For each call the table holds the reply statuses that answer it, each with what its payload resolves to
(FAILED, REFUSED and NOT_READY fail any call: kvnode.replica.answers says with which error). A peer
resolves every reply by it (kvnode.replica.answers); the server (kvnode.node.peer_answers) has one answerer an
entry and answers with one of its statuses. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvnode.replica import wire
from kvnode.storage.records import Record, decode, encode

__all__ = [
    "ADDED_IN",
    "CLOCK_PINGS",
    "CURRENT_VERSION",
    "LEGACY",
    "MIN_VERSION",
    "PROTOCOL",
    "Answers",
    "Versions",
    "negotiate",
    "ops_of",
    "spoken",
    "write_call",
]

MIN_VERSION = 1  # the oldest version this kvnode still speaks
CURRENT_VERSION = 3  # the newest; a node pinned with --max-protocol speaks up to less
ADDED_IN: dict[wire.Op, int] = {wire.Op.DELETE: 2}  # the version each later op came in; the rest are 1's
CLOCK_PINGS = 3  # the version clock pings came in


@dataclass(frozen=True, slots=True)
class Versions:
    """A range of protocol versions one node speaks, ``low`` to ``high`` inclusive; written "1-2".

    >>> Versions.parse("1-2"), Versions.parse("2-1"), Versions.parse("x")
    (Versions(low=1, high=2), None, None)
    """

    low: int
    high: int

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"

    @classmethod
    def parse(cls, text: str) -> Versions | None:
        """The range ``text`` writes, or None for anything else."""
        low, dash, high = text.partition("-")
        if not (dash and _small_number(low) and _small_number(high)) or not 0 < int(low) <= int(high):
            return None
        return cls(int(low), int(high))


def _small_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 6


LEGACY = Versions(1, 1)  # what a node that says no range speaks


def spoken(max_version: int = 0) -> Versions:
    """What this node speaks: MIN_VERSION up to ``max_version`` (0: CURRENT_VERSION).

    >>> str(spoken()), str(spoken(1))
    ('1-3', '1-1')
    """
    if not (max_version == 0 or MIN_VERSION <= max_version <= CURRENT_VERSION):
        raise ValueError(
            f"a maximum protocol version is {MIN_VERSION} to {CURRENT_VERSION}, got {max_version}"
        )
    return Versions(MIN_VERSION, max_version or CURRENT_VERSION)


def negotiate(ours: Versions, theirs: Versions) -> int | None:
    """The highest version both ranges hold, or None when they have none in common."""
    highest = min(ours.high, theirs.high)
    return highest if highest >= max(ours.low, theirs.low) else None


def ops_of(version: int) -> frozenset[wire.Op]:
    """The ops a channel speaking ``version`` carries."""
    return frozenset(op for op in wire.Op if ADDED_IN.get(op, 1) <= version)


def write_call(key: bytes, record: Record, version: int) -> tuple[wire.Op, bytes, bytes]:
    """How a write of ``record`` travels on a channel speaking ``version``: its op, key and record.

    >>> [write_call(b"k", Record.delete(7), version)[0].name for version in (1, 2)]
    ['WRITE', 'DELETE']
    >>> write_call(b"k", Record.put(7, b"v"), 2)[0].name
    'WRITE'
    """
    if version >= ADDED_IN[wire.Op.DELETE] and record == Record.delete(
        record.timestamp, copies=record.copies
    ):
        return wire.Op.DELETE, key, wire.encode_delete(record)
    return wire.Op.WRITE, key, encode(record)


Answers = Mapping[wire.Status, Callable[[bytes], object]]  # a reply's status -> what its payload resolves to


def _nothing(payload: bytes) -> None:
    return None


def _payload(payload: bytes) -> bytes:
    return payload


_READ = {wire.Status.FOUND: decode, wire.Status.ABSENT: _nothing}
_WRITE = {wire.Status.STORED: _nothing, wire.Status.NEWER: wire.decode_timestamp}

# The replica protocol, one entry a call: a peer resolves each reply by it (kvnode.replica.answers), and
# the server (kvnode.node.peer_answers) has one answerer an entry, answering with one of its statuses.
PROTOCOL: dict[wire.Op, Answers] = {
    wire.Op.READ: _READ,
    wire.Op.FETCH: _READ,
    wire.Op.WRITE: _WRITE,
    wire.Op.DELETE: _WRITE,  # version 2
    wire.Op.CLOCK: {wire.Status.CLOCK: wire.decode_clock},
    wire.Op.BRANCHES: {wire.Status.HASHES: _payload},  # the key is the caller's URL
    wire.Op.SEGMENTS: {wire.Status.HASHES: _payload},
    wire.Op.LIST: {wire.Status.LISTING: _payload},
    wire.Op.MEMBERSHIP: {wire.Status.MEMBERSHIP: _payload},
    wire.Op.ADOPT: {wire.Status.STORED: _nothing},
    wire.Op.SCAN: {wire.Status.RECORDS: _payload},
}
