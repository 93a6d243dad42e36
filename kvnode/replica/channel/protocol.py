"""The replica protocol: its versions, and its calls as one table (:data:`PROTOCOL`).

A node speaks a range of protocol versions, MIN_VERSION to CURRENT_VERSION (fewer with ``--max-protocol``, for
rolling upgrades and tests); each end of a replica channel says its range in the handshake
(kvnode.replica.channel.handshake) and both use the highest version in both ranges (:func:`negotiate`), so a
cluster upgrades one node at a time. No common version refuses the connection. A node that says no range is a
kvnode from before versions were negotiated: it speaks version 1 only.

    >>> negotiate(Versions(1, 2), Versions(1, 1)), negotiate(Versions(1, 2), Versions(1, 2))
    (1, 2)
    >>> negotiate(Versions(2, 2), Versions(1, 1)) is None
    True
    >>> sorted(op.name for op in ops_of(2) - ops_of(1))
    ['DELETE']

Versions: 1, every op but DELETE; 2 adds DELETE (a delete as its timestamp and replica count:
kvnode.replica.channel.wire.encode_delete), which a peer sends in place of a tombstone's WRITE once the
channel speaks 2, and a server refuses on a channel that speaks 1 as an unknown op. 3 adds clock pings: a ping
that carries the pinger's wall clock (8 bytes) is answered by a pong that carries them back followed by a
CLOCK reply's payload, so the heartbeat measures the peer's clock (kvnode.replica.clock_probe) where a channel
that speaks 2 or 1 makes a CLOCK call. 4 adds a conditional write's Paxos calls (PREPARE, PROPOSE, COMMIT:
kvnode.paxos): a node does not make them on a channel that speaks less, and answers a conditional request
whose owners it cannot reach so with a 503 during a rolling upgrade. 5 adds FORWARD
(kvnode.coordinator.forwarding): a write for the owners of another datacenter, sent to one of them, which
stores its own copy, relays it to the others and answers each one's outcome as it comes in (FORWARDING, the
last FORWARDED); a coordinator sends it only on a channel that speaks 5, and writes to each owner itself
otherwise, as before. A FORWARD is answered as the relayed writes are: the one call whose answer does not
come with its frame's (kvnode.replica.channel.answerers), and the one answered in parts (:class:`Part`).

:data:`PROTOCOL` is the one table of the calls, a row each: the version the call came in, and the reply
statuses that answer it, each with what its payload resolves to. FAILED, REFUSED and NOT_READY fail any call
(:func:`resolve` says with which error). The client end resolves every reply by it; the server end
(kvnode.replica.channel.answerers) hands each call to the answerer its owner registered for the op, which
answers with one of the row's statuses. So a new call is its op (``wire.Op``), its row here, and its
answerer in the part of the node that owns what it asks. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

from kvnode.replica.channel import wire
from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaNotReady,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
)
from kvnode.storage.keyspace import DISK_FULL
from kvnode.storage.records import CorruptRecord, Record, decode, encode

__all__ = [
    "CLOCK_PINGS",
    "CLOCK_PING_SIZE",
    "CURRENT_VERSION",
    "FORWARDS",
    "LEGACY",
    "MIN_VERSION",
    "PAXOS",
    "PROTOCOL",
    "Answers",
    "Call",
    "Part",
    "Versions",
    "clock_pong",
    "negotiate",
    "ops_of",
    "resolve",
    "spoken",
    "write_call",
]

MIN_VERSION = 1  # the oldest version this kvnode still speaks
CURRENT_VERSION = 5  # the newest; a node pinned with --max-protocol speaks up to less
CLOCK_PINGS = 3  # the version clock pings came in
PAXOS = 4  # the version conditional writes' calls came in (PREPARE, PROPOSE, COMMIT)
FORWARDS = 5  # the version a write forwarded to another datacenter came in (FORWARD)
CLOCK_PING_SIZE = 8  # a clock ping's payload: the pinger's wall clock (wire.encode_timestamp)


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
    ('1-5', '1-1')
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
    return frozenset(op for op, call in PROTOCOL.items() if call.since <= version)


def clock_pong(ping: bytes, clock: Callable[[], bytes]) -> bytes:
    """The pong that answers ``ping`` on a channel with clock pings: a clock ping's payload followed by
    ``clock()`` (a CLOCK reply's payload); any other ping's payload as it came.

    >>> wire.decode_clock(clock_pong(wire.encode_timestamp(5), lambda: wire.encode_clock(9, "serving"))[8:])
    (9, 'serving')
    >>> clock_pong(b"beat", lambda: b"never asked")
    b'beat'
    """
    return ping + clock() if len(ping) == CLOCK_PING_SIZE else ping


def write_call(
    key: bytes, record: Record, version: int, encoded: bytes | None = None
) -> tuple[wire.Op, bytes, bytes]:
    """How a write of ``record`` travels on a channel speaking ``version``: its op, key and record (its
    bytes ``encoded``, when the caller has them).

    >>> [write_call(b"k", Record.delete(7), version)[0].name for version in (1, 2)]
    ['WRITE', 'DELETE']
    >>> write_call(b"k", Record.put(7, b"v"), 2)[0].name
    'WRITE'
    """
    # A tombstone as Record.delete makes it (no value, no expiry), told by its fields: none built to compare.
    if record.tombstone and version >= _DELETES and not record.value and not record.expires:
        return wire.Op.DELETE, key, wire.encode_delete(record)
    return wire.Op.WRITE, key, encode(record) if encoded is None else encoded


Answers = Mapping[wire.Status, Callable[[bytes], object]]  # a reply's status -> what its payload resolves to


class Part(NamedTuple):
    """Part of a call's answer (a FORWARDING reply's payload): the call stays in flight for the rest."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class Call:
    """A row of the protocol table: the version a call came in, and what each status answering it resolves
    to."""

    since: int
    answers: Answers


def _nothing(payload: bytes) -> None:
    return None


def _payload(payload: bytes) -> bytes:
    return payload


def _part(payload: bytes) -> Part:
    return Part(payload)


_READ = {wire.Status.FOUND: decode, wire.Status.ABSENT: _nothing}
_WRITE = {wire.Status.STORED: _nothing, wire.Status.NEWER: wire.decode_timestamp}

# The replica protocol, a row a call (its op is in wire.Op): the client end resolves each reply by it
# (resolve), and the server end hands each call to the answerer its owner registered for it
# (kvnode.replica.channel.answerers); tests/unit/kvnode/node/test_wiring.py checks a wired node answers all.
PROTOCOL: dict[wire.Op, Call] = {
    wire.Op.READ: Call(1, _READ),  # kvnode.replica.storage_calls, as the next four
    wire.Op.FETCH: Call(1, _READ),
    wire.Op.WRITE: Call(1, _WRITE),
    wire.Op.DELETE: Call(2, _WRITE),
    wire.Op.SCAN: Call(1, {wire.Status.RECORDS: _payload}),
    wire.Op.CLOCK: Call(1, {wire.Status.CLOCK: wire.decode_clock}),  # kvnode.replica.clock_probe
    wire.Op.BRANCHES: Call(1, {wire.Status.HASHES: _payload}),  # kvnode.healing.repair_calls, as LIST
    wire.Op.SEGMENTS: Call(1, {wire.Status.HASHES: _payload}),
    wire.Op.LIST: Call(1, {wire.Status.LISTING: _payload}),
    wire.Op.MEMBERSHIP: Call(1, {wire.Status.MEMBERSHIP: _payload}),  # kvnode.cluster.membership_calls
    wire.Op.ADOPT: Call(1, {wire.Status.STORED: _nothing}),
    wire.Op.PREPARE: Call(PAXOS, {wire.Status.PAXOS: _payload}),  # kvnode.paxos.acceptor_calls, as the next
    wire.Op.PROPOSE: Call(PAXOS, {wire.Status.PAXOS: _payload}),
    wire.Op.COMMIT: Call(PAXOS, {wire.Status.PAXOS: _payload}),
    wire.Op.FORWARD: Call(  # kvnode.coordinator.forwarding
        FORWARDS, {wire.Status.FORWARDING: _part, wire.Status.FORWARDED: _payload}
    ),
}


_DELETES = PROTOCOL[wire.Op.DELETE].since  # the version a tombstone travels as a DELETE from


def resolve(url: str, op: wire.Op, reply: wire.ReplicaReply) -> tuple[ReplicaError | None, object]:
    """What a call to the peer at ``url`` ends in, from its reply: (None, the value its row resolves it
    to), or (the error it fails with, None): a failed reply's named error, and a protocol error for a
    status the row does not have or a payload that does not decode.

    >>> newer = wire.ReplicaReply(7, wire.Status.NEWER, wire.encode_timestamp(42))
    >>> resolve("http://b:1", wire.Op.WRITE, newer)
    (None, 42)
    >>> resolve("http://b:1", wire.Op.READ, wire.ReplicaReply(7, wire.Status.STORED, b""))
    (ReplicaProtocolError('http://b:1: reply STORED does not answer a READ'), None)
    """
    decoder = PROTOCOL[op].answers.get(reply.status)  # no row answers a call with a failed reply's status
    try:
        if decoder is None:
            _fail(op, reply)
        return None, None if decoder is _nothing else decoder(reply.payload)  # a write's STORED: no call
    except CorruptRecord as error:
        return ReplicaProtocolError(f"{url}: malformed record in reply: {error}"), None
    except wire.WireError as error:
        return ReplicaProtocolError(f"{url}: {error}"), None
    except ReplicaRejected as error:
        return type(error)(f"{url}: {error}"), None


def _fail(op: wire.Op, reply: wire.ReplicaReply) -> NoReturn:
    """Raise what a reply whose status the call's row lacks fails with: ReplicaRejected (or
    ReplicaDiskFull), ReplicaSkewRefused or ReplicaNotReady for a failed reply, else wire.WireError."""
    status = reply.status
    if status is wire.Status.FAILED:
        reason = reply.payload.decode("utf-8", "replace")
        raise (ReplicaDiskFull if reason.startswith(DISK_FULL) else ReplicaRejected)(reason)
    if status is wire.Status.REFUSED:
        raise ReplicaSkewRefused(reply.payload.decode("utf-8", "replace"))
    if status is wire.Status.NOT_READY:
        raise ReplicaNotReady("its data is not whole yet (it rebuilds)")
    raise wire.WireError(f"reply {status.name} does not answer a {op.name}")
