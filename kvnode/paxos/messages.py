"""The messages of a Paxos round on one key, and their byte codec (pure).

A proposer sends ``Prepare``, ``Propose`` and ``Commit``; an acceptor answers a prepare with ``Promise``
or ``Refused``, a proposal with ``Accepted`` or ``Refused``, and a commit with ``Committed``. The key is
not in them: it travels in the replica call that carries them.

Every message is one tag byte and its fields; ``decode`` raises ValueError (a
kvnode.storage.records.CorruptRecord for a bad record inside) on any input ``encode`` does not make::

    >>> from kvnode.storage.records import Record
    >>> ballot = Ballot(1_000, 7)
    >>> propose = Propose(Proposal(ballot, Record.put(1_000, b"v")))
    >>> len(encode(propose))   # the tag, the ballot, the record (a 9-byte header and the value)
    27
    >>> decode(encode(propose)) == propose
    True
    >>> promise = Promise(ballot, accepted=None, committed=Ballot(0, 0), stored=Record.delete(9))
    >>> decode(encode(promise)) == promise
    True
    >>> decode(b"\\x09")
    Traceback (most recent call last):
    ...
    ValueError: unknown Paxos message tag 9
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from kvnode.paxos.ballot import BALLOT_BYTES, Ballot, decode_ballot, encode_ballot
from kvnode.storage import records
from kvnode.storage.records import Record

__all__ = [
    "Accepted",
    "Commit",
    "Committed",
    "Message",
    "Prepare",
    "Promise",
    "Proposal",
    "Propose",
    "Refused",
    "Reply",
    "Request",
    "decode",
    "decode_proposal",
    "encode",
    "encode_proposal",
]


class Proposal(NamedTuple):
    """A version proposed (or accepted, or committed) at a ballot."""

    ballot: Ballot
    record: Record


class Prepare(NamedTuple):
    ballot: Ballot


class Propose(NamedTuple):
    proposal: Proposal


class Commit(NamedTuple):
    """Store ``proposal.record`` as a normal write, and record ``proposal.ballot`` as committed."""

    proposal: Proposal


class Promise(NamedTuple):
    """An acceptor's promise to accept no ballot below ``ballot``, with what the proposer must know."""

    ballot: Ballot  # the prepare's
    accepted: Proposal | None  # the proposal accepted and not yet committed, if any
    committed: Ballot  # the most recent commit's ballot (ZERO_BALLOT: none)
    stored: Record | None = None  # the acceptor's stored version of the key: the driver fills it in


class Accepted(NamedTuple):
    ballot: Ballot


class Committed(NamedTuple):
    ballot: Ballot  # the commit's


class Refused(NamedTuple):
    """A prepare or proposal at ``ballot`` refused: the acceptor promised or committed ``promised``."""

    ballot: Ballot
    promised: Ballot


Request = Prepare | Propose | Commit
Reply = Promise | Accepted | Committed | Refused
Message = Request | Reply

_PREPARE, _PROPOSE, _COMMIT, _PROMISE, _ACCEPTED, _COMMITTED, _REFUSED = range(1, 8)
_BALLOT_ONLY: dict[int, Callable[[Ballot], Prepare | Accepted | Committed]] = {
    _PREPARE: Prepare,
    _ACCEPTED: Accepted,
    _COMMITTED: Committed,
}
_RECORD_LENGTH = struct.Struct(">I")
_HAS_ACCEPTED, _HAS_STORED = 0x01, 0x02


def encode_proposal(proposal: Proposal) -> bytes:
    return encode_ballot(proposal.ballot) + records.encode(proposal.record)


def decode_proposal(data: bytes) -> Proposal:
    return Proposal(decode_ballot(data), records.decode(data[BALLOT_BYTES:]))


def encode(message: Message) -> bytes:
    if isinstance(message, Prepare):
        return bytes([_PREPARE]) + encode_ballot(message.ballot)
    if isinstance(message, Propose):
        return bytes([_PROPOSE]) + encode_proposal(message.proposal)
    if isinstance(message, Commit):
        return bytes([_COMMIT]) + encode_proposal(message.proposal)
    if isinstance(message, Accepted):
        return bytes([_ACCEPTED]) + encode_ballot(message.ballot)
    if isinstance(message, Committed):
        return bytes([_COMMITTED]) + encode_ballot(message.ballot)
    if isinstance(message, Refused):
        return bytes([_REFUSED]) + encode_ballot(message.ballot) + encode_ballot(message.promised)
    return _encode_promise(message)


def _encode_promise(promise: Promise) -> bytes:
    accepted = b"" if promise.accepted is None else encode_proposal(promise.accepted)
    flags = (_HAS_ACCEPTED if accepted else 0) | (_HAS_STORED if promise.stored is not None else 0)
    parts = [
        bytes([_PROMISE]),
        encode_ballot(promise.ballot),
        encode_ballot(promise.committed),
        bytes([flags]),
    ]
    if accepted:
        parts += [_RECORD_LENGTH.pack(len(accepted)), accepted]
    if promise.stored is not None:
        parts.append(records.encode(promise.stored))
    return b"".join(parts)


def decode(data: bytes) -> Message:
    if not data:
        raise ValueError("empty Paxos message")
    tag, body = data[0], data[1:]
    if tag in _BALLOT_ONLY:
        _expect_length(body, BALLOT_BYTES, tag)
        return _BALLOT_ONLY[tag](decode_ballot(body))
    if tag == _REFUSED:
        _expect_length(body, 2 * BALLOT_BYTES, tag)
        return Refused(decode_ballot(body), decode_ballot(body, BALLOT_BYTES))
    if tag == _PROPOSE:
        return Propose(decode_proposal(body))
    if tag == _COMMIT:
        return Commit(decode_proposal(body))
    if tag == _PROMISE:
        return _decode_promise(body)
    raise ValueError(f"unknown Paxos message tag {tag}")


def _decode_promise(body: bytes) -> Promise:
    head = 2 * BALLOT_BYTES + 1
    if len(body) < head:
        raise ValueError(f"a promise needs at least {head} bytes, has {len(body)}")
    ballot, committed, flags = decode_ballot(body), decode_ballot(body, BALLOT_BYTES), body[head - 1]
    if flags & ~(_HAS_ACCEPTED | _HAS_STORED):
        raise ValueError(f"a promise with unknown flags 0x{flags:02x}")
    rest = body[head:]
    accepted = None
    if flags & _HAS_ACCEPTED:
        if len(rest) < _RECORD_LENGTH.size:
            raise ValueError("a promise's accepted proposal has no length")
        (length,) = _RECORD_LENGTH.unpack_from(rest)
        end = _RECORD_LENGTH.size + length
        if len(rest) < end:
            raise ValueError(f"a promise's accepted proposal is cut short: {length} bytes announced")
        accepted, rest = decode_proposal(rest[_RECORD_LENGTH.size : end]), rest[end:]
    stored = records.decode(rest) if flags & _HAS_STORED else None
    if not flags & _HAS_STORED and rest:
        raise ValueError(f"a promise has {len(rest)} bytes after its fields")
    return Promise(ballot, accepted, committed, stored)


def _expect_length(body: bytes, length: int, tag: int) -> None:
    if len(body) != length:
        raise ValueError(f"Paxos message tag {tag} needs {length} bytes, has {len(body)}")
