"""A write crossing to another datacenter once (pure): which of a datacenter's owners forwards it to the
others (:func:`crossings`), how long it may take to (:func:`budget_s`), and the FORWARD call's codec (its
request, and each owner's outcome in its reply), as Cassandra's coordinator sends one copy to a remote
datacenter, whose receiver forwards it there.

A coordinator writes to the owners in its own datacenter itself. In each other datacenter with two owners
or more, the first owner in its placement order that can forward (its channel open and speaking
protocol 5, not lagging) is sent a FORWARD naming every owner of that datacenter, itself first; it stores
its own copy, relays the write to the others, and answers each one's outcome as it comes in, so that the
coordinator counts, hints and answers every owner as if it had written to it itself, as soon as it would
have (kvnode.coordinator.forwarding).

    >>> from collections import namedtuple
    >>> Owner = namedtuple("Owner", "url")
    >>> order = [Owner("http://e1"), Owner("http://w1"), Owner("http://w2"), Owner("http://w3")]
    >>> datacenter = {"http://e1": "east"}.get
    >>> [[owner.url for owner in crossing] for crossing in crossings(
    ...     order, lambda url: datacenter(url, "west"), "east", lambda owner: owner.url != "http://w1")]
    [['http://w2', 'http://w1', 'http://w3']]
    >>> request = decode_request(encode_request(0.7, ["http://w2", "http://w1"], Record.put(7, b"v")))
    >>> request.budget_s, request.targets, request.record.value
    (0.7, ('http://w2', 'http://w1'), b'v')
    >>> reply = encode_outcomes([(0, STORED), (2, Outcome(newer=9)), (1, NOT_RELAYED)])
    >>> [(index, outcome.newer, outcome.relayed) for index, outcome in decode_outcomes(reply, 3)]
    [(0, None, True), (2, 9, True), (1, None, False)]
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from kvnode.replica import errors
from kvnode.replica.channel.wire import MAX_FORWARD_TARGETS, WireError
from kvnode.replica.errors import ReplicaError, ReplicaRejected
from kvnode.storage.records import Record, decode, encode

__all__ = [
    "NOT_RELAYED",
    "STORED",
    "ForwardRequest",
    "Outcome",
    "budget_s",
    "crossings",
    "decode_outcomes",
    "decode_request",
    "encode_outcomes",
    "encode_request",
]

_HEAD = struct.Struct(">IB")  # the budget (ms), the number of targets
_URL = struct.Struct(">B")
_OUTCOME = struct.Struct(">BBH")  # the owner's place in the request, the outcome's kind, what follows' length
_TIMESTAMP = struct.Struct(">Q")
_MAX_URL_BYTES = 255
_MAX_REASON_BYTES = 1000  # an owner's failure, as the forwarder words it, cut to this


class Owner(Protocol):
    @property
    def url(self) -> str: ...


R = TypeVar("R", bound=Owner)


def crossings(
    replicas: Sequence[R], datacenter_of: Callable[[str], str], home: str, forwards: Callable[[R], bool]
) -> list[tuple[R, ...]]:
    """The owners a write sends through a forwarder, a tuple a datacenter, its forwarder first and the others
    in ``replicas``' order: in each datacenter but ``home`` whose owners are two or more (at most
    MAX_FORWARD_TARGETS, each URL at most 255 bytes), the first owner that ``forwards``. The owners in no
    tuple are written directly: the home datacenter's, a lone owner, a datacenter where none forwards."""
    by_datacenter: dict[str, list[R]] = {}
    for replica in replicas:
        datacenter = datacenter_of(replica.url)
        if datacenter != home:
            by_datacenter.setdefault(datacenter, []).append(replica)
    found = []
    for owners in by_datacenter.values():
        if not 2 <= len(owners) <= MAX_FORWARD_TARGETS:
            continue
        if any(len(owner.url.encode()) > _MAX_URL_BYTES for owner in owners):
            continue
        forwarder = next((owner for owner in owners if forwards(owner)), None)
        if forwarder is not None:
            found.append((forwarder, *(owner for owner in owners if owner is not forwarder)))
    return found


def budget_s(timeout_s: float, distance_s: float) -> float:
    """How long a forwarder may wait for the owners it relays to before it answers: the coordinator's
    call to it times out after ``timeout_s``, and its answer takes a round trip to it (``distance_s``, the
    shortest recent one) to come back; a tenth of the timeout is left for the rest of the trip (jitter, a
    busy loop). At least a quarter of the timeout.

    >>> budget_s(1.0, 0.1), budget_s(1.0, 0.0005), budget_s(1.0, 2.0)
    (0.7, 0.899, 0.25)
    """
    return round(max(timeout_s / 4, timeout_s - 2 * distance_s - timeout_s / 10), 6)


class ForwardRequest(NamedTuple):
    """What a FORWARD asks: relay ``record`` to ``targets`` (the forwarder among them), and answer within
    ``budget_s`` of receiving it."""

    budget_s: float
    targets: tuple[str, ...]
    record: Record


def encode_request(budget: float, targets: Sequence[str], record: Record) -> bytes:
    """A FORWARD's record: budget_ms:u32 | targets:u8 | (url_len:u8 | url)* | the encoded record."""
    parts = [_HEAD.pack(round(budget * 1000), len(targets))]
    for url in targets:
        encoded = url.encode()
        parts += [_URL.pack(len(encoded)), encoded]
    parts.append(encode(record))
    return b"".join(parts)


def decode_request(payload: bytes) -> ForwardRequest:
    """Raises WireError for a request that does not decode (CorruptRecord, a ValueError too, for its
    record)."""
    if len(payload) < _HEAD.size:
        raise WireError("FORWARD request shorter than its header")
    budget_ms, count = _HEAD.unpack_from(payload)
    if not 1 <= count <= MAX_FORWARD_TARGETS:
        raise WireError(f"FORWARD to {count} owners (1 to {MAX_FORWARD_TARGETS} allowed)")
    offset, targets = _HEAD.size, []
    for _ in range(count):
        if offset >= len(payload):
            raise WireError("FORWARD request ends inside its owners")
        length = payload[offset]
        offset += _URL.size
        if offset + length > len(payload):
            raise WireError("FORWARD request's owner runs past its end")
        targets.append(payload[offset : offset + length].decode("utf-8", "replace"))
        offset += length
    return ForwardRequest(budget_ms / 1000, tuple(targets), decode(payload[offset:]))


class Outcome(NamedTuple):
    """One owner's outcome of a FORWARD: its error, or None and the newer version's timestamp it holds
    (None: it took the write), as a write's callback is told; ``relayed`` False when the forwarder did not
    send it the write (no channel open to it, or it is no member there): the coordinator writes to it
    itself."""

    error: ReplicaError | None = None
    newer: int | None = None
    relayed: bool = True


STORED = Outcome()
NOT_RELAYED = Outcome(relayed=False)

# An outcome's kind on the wire: 0 stored, 1 newer, 2 not relayed, then each error by its class.
_ERRORS: tuple[type[ReplicaError], ...] = (
    errors.ReplicaUnavailable,
    errors.ReplicaTimeout,
    errors.ReplicaOverloaded,
    errors.ReplicaProtocolError,
    ReplicaRejected,
    errors.ReplicaDiskFull,
    errors.ReplicaSkewRefused,
    errors.ReplicaNotReady,
)  # append only: a kind's number is its place here
_FIRST_ERROR = 3


def encode_outcomes(outcomes: Sequence[tuple[int, Outcome]]) -> bytes:
    """A FORWARDING or FORWARDED reply's payload: owners' outcomes, each with the owner's place among the
    request's targets."""
    parts = []
    for index, outcome in outcomes:
        if outcome.error is not None:
            kind = _FIRST_ERROR + _ERRORS.index(_kind_of(outcome.error))
            detail = str(outcome.error).encode()[:_MAX_REASON_BYTES]
        elif not outcome.relayed:
            kind, detail = 2, b""
        elif outcome.newer is not None:
            kind, detail = 1, _TIMESTAMP.pack(outcome.newer)
        else:
            kind, detail = 0, b""
        parts += [_OUTCOME.pack(index, kind, len(detail)), detail]
    return b"".join(parts)


def _kind_of(error: ReplicaError) -> type[ReplicaError]:
    """The class an error travels as: its own, or ReplicaRejected for one the wire does not name."""
    return type(error) if type(error) in _ERRORS else ReplicaRejected


def decode_outcomes(payload: bytes, targets: int) -> list[tuple[int, Outcome]]:
    """Owners' outcomes, each with its place among the request's ``targets``; raises WireError for a
    payload that does not hold them.

    >>> [(index, type(outcome.error).__name__) for index, outcome in decode_outcomes(
    ...     encode_outcomes([(1, Outcome(errors.ReplicaTimeout("http://w3 did not answer")))]), 2)]
    [(1, 'ReplicaTimeout')]
    """
    outcomes: list[tuple[int, Outcome]] = []
    offset = 0
    while offset < len(payload):
        if len(payload) - offset < _OUTCOME.size:
            raise WireError("FORWARD reply ends inside an outcome's header")
        index, kind, length = _OUTCOME.unpack_from(payload, offset)
        offset += _OUTCOME.size
        detail = payload[offset : offset + length]
        offset += length
        if len(detail) != length or kind >= _FIRST_ERROR + len(_ERRORS) or index >= targets:
            raise WireError(
                f"FORWARD reply has a malformed outcome (owner {index} of {targets}, kind {kind})"
            )
        if kind >= _FIRST_ERROR:
            error = _ERRORS[kind - _FIRST_ERROR](detail.decode("utf-8", "replace"))
            outcomes.append((index, Outcome(error)))
        elif kind == 2:
            outcomes.append((index, NOT_RELAYED))
        elif kind == 1:
            if length != _TIMESTAMP.size:
                raise WireError("FORWARD reply's newer version is not a timestamp")
            outcomes.append((index, Outcome(newer=_TIMESTAMP.unpack(detail)[0])))
        else:
            outcomes.append((index, STORED))
    return outcomes
