"""Versioned records: what one key holds on a replica, its byte layout, and which of two versions wins.

A record is (timestamp, tombstone, value, expires, copies). Its field order *is* the ordering of versions, so
plain tuple comparison decides every conflict the same way on every node::

    >>> Record(5, False, b"a") < Record(5, True, b"")   # a tombstone wins a tie
    True
    >>> max(Record(5, False, b"a"), Record(5, False, b"b")).value   # then the greater bytes
    b'b'
    >>> Record.put(5, b"a") < Record.put(5, b"a", ttl_us=10)   # then an expiring version, the later
    True

A version written with a TTL carries its expiry, the write's timestamp plus the TTL in the clock's
microseconds (0: it never expires), so every node judges it against the same instant, as Cassandra's
``USING TTL`` does. An expired version reads as absent, like a tombstone, and still wins over older
versions, so it hides them::

    >>> record = Record.put(1_000, b"v", ttl_us=500)
    >>> record.expires, record.absent_at(1_499), record.absent_at(1_500)
    (1500, False, True)
    >>> record.restamped(2_000).expires   # a rewrite keeps the TTL, counted from its new timestamp
    2500
    >>> len(encode(Record.put(1, b"v"))), len(encode(record))   # the expiry costs bytes only when set
    (10, 18)

A version also says how many copies it was written to (the request's ``from``, kvnode.coordinator.quorum's
``Quorum.copies``) when that is fewer than the key's N owners (0: all N, the default), so that anti-entropy
knows, on every node alike, which members should hold it (kvnode.healing)::

    >>> decode(encode(Record.put(1, b"v", copies=2))).copies
    2
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

__all__ = [
    "COPIES_FLAG",
    "FLAGS_AT",
    "MAX_HEADER_BYTES",
    "CorruptRecord",
    "Record",
    "check",
    "copies_of",
    "decode",
    "encode",
    "newest",
]

# timestamp (u64 microseconds, big-endian) + flags (u8); with _EXPIRES set the expiry (u64 microseconds)
# follows, with _COPIES the replica count (u16), then the value bytes. A record with neither keeps the
# layout it had before TTLs, so data dirs, hints and the replica wire written before stay valid.
_HEADER = struct.Struct(">QB")
_EXPIRY = struct.Struct(">Q")
_COPIES = struct.Struct(">H")
_TOMBSTONE = 0x01
_EXPIRES = 0x02
_COPIES_SET = 0x04
_new_tuple = tuple.__new__
_FLAGS = _TOMBSTONE | _EXPIRES | _COPIES_SET
MAX_HEADER_BYTES = _HEADER.size + _EXPIRY.size + _COPIES.size  # the most a record adds to its value
FLAGS_AT = _HEADER.size - 1  # the flags byte's offset, for a reader that only wants to know
COPIES_FLAG = _COPIES_SET  # set in it when the record names its replica count (copies_of reads it)


class CorruptRecord(ValueError):
    """Stored bytes that are not a record this codec wrote."""


class Record(NamedTuple):
    timestamp: int
    tombstone: bool
    value: bytes
    # Last so that a version without a TTL orders exactly as before TTLs: at a tie of the other fields an
    # expiring version wins over a permanent one, and the later expiry over the earlier.
    expires: int = 0
    copies: int = 0  # the owners it was written to (the request's `from`) when fewer than N; 0 = all N owners

    # Made by _new_tuple here and in decode, as NamedTuple's own __new__ does, without its Python-level
    # call: a request makes or decodes a record for every replica.

    @classmethod
    def put(cls, timestamp: int, value: bytes, *, ttl_us: int = 0, copies: int = 0) -> Record:
        return _new_tuple(cls, (timestamp, False, value, timestamp + ttl_us if ttl_us else 0, copies))

    @classmethod
    def delete(cls, timestamp: int, *, copies: int = 0) -> Record:
        return _new_tuple(cls, (timestamp, True, b"", 0, copies))

    def restamped(self, timestamp: int) -> Record:
        """This version stamped ``timestamp`` instead, its TTL (if any) counted from the new timestamp."""
        if not self.expires:
            return self._replace(timestamp=timestamp)
        return self._replace(timestamp=timestamp, expires=timestamp + self.expires - self.timestamp)

    def expired_at(self, now: int) -> bool:
        """Whether this version's TTL has run out at ``now`` (the clock's microseconds)."""
        return 0 < self.expires <= now

    def absent_at(self, now: int) -> bool:
        """Whether this version reads as absent at ``now``: a tombstone, or expired, which behaves as one
        (and tombstone GC drops it as one: kvnode.healing.gc_rule)."""
        return self.tombstone or 0 < self.expires <= now  # expired_at, without a call for every read


def encode(record: Record) -> bytes:
    timestamp, tombstone, value, expires, copies = record
    if not expires and not copies:
        return _HEADER.pack(timestamp, _TOMBSTONE if tombstone else 0) + value
    flags = (_TOMBSTONE if tombstone else 0) | (_EXPIRES if expires else 0) | (_COPIES_SET if copies else 0)
    head = _HEADER.pack(timestamp, flags)
    if expires:
        head += _EXPIRY.pack(expires)
    if copies:
        head += _COPIES.pack(copies)
    return head + value


def decode(data: bytes) -> Record:
    timestamp, flags = _HEADER.unpack_from(check(data))
    if flags <= _TOMBSTONE:
        return _new_tuple(Record, (timestamp, bool(flags), data[_HEADER.size :], 0, 0))
    offset, expires, copies = _HEADER.size, 0, 0
    if flags & _EXPIRES:
        (expires,) = _EXPIRY.unpack_from(data, offset)
        offset += _EXPIRY.size
    if flags & _COPIES_SET:
        (copies,) = _COPIES.unpack_from(data, offset)
        offset += _COPIES.size
    return Record(timestamp, bool(flags & _TOMBSTONE), data[offset:], expires, copies)


def check(data: bytes) -> bytes:
    """``data`` itself if it is an encoded record, else CorruptRecord: decode's checks without building
    the Record, for bytes passed on as they are (a replica answering a read)."""
    if len(data) < _HEADER.size:
        raise CorruptRecord(f"record is {len(data)} bytes, shorter than its {_HEADER.size}-byte header")
    flags = data[_HEADER.size - 1]
    if flags & ~_FLAGS:
        raise CorruptRecord(f"record has unknown flags 0x{flags:02x}")
    header = (
        _HEADER.size
        + (_EXPIRY.size if flags & _EXPIRES else 0)
        + (_COPIES.size if flags & _COPIES_SET else 0)
    )
    if len(data) < header:
        raise CorruptRecord(f"record is {len(data)} bytes, shorter than its {header}-byte header")
    if flags & _TOMBSTONE and flags & _EXPIRES:
        raise CorruptRecord("tombstone record carries an expiry")
    if flags & _TOMBSTONE and len(data) != header:
        raise CorruptRecord("tombstone record carries a value")
    if flags & _EXPIRES:
        timestamp, _ = _HEADER.unpack_from(data)
        (expires,) = _EXPIRY.unpack_from(data, _HEADER.size)
        if expires <= timestamp:
            raise CorruptRecord(f"record expires at {expires}, not after its timestamp {timestamp}")
    if flags & _COPIES_SET and not _COPIES.unpack_from(data, header - _COPIES.size)[0]:
        raise CorruptRecord("record names 0 copies")
    return data


def copies_of(data: bytes) -> int:
    """The ``copies`` of encoded record bytes without decoding the rest; 0 (all N owners) for bytes that
    are not a record, so a corrupt record is summarised like any other (kvnode.healing.summary).

    >>> copies_of(encode(Record.put(1, b"v", ttl_us=5, copies=3))), copies_of(encode(Record.put(1, b"v")))
    (3, 0)
    """
    if len(data) < _HEADER.size:
        return 0
    flags = data[_HEADER.size - 1]
    if not flags & _COPIES_SET or flags & ~_FLAGS:
        return 0
    offset = _HEADER.size + (_EXPIRY.size if flags & _EXPIRES else 0)
    if len(data) < offset + _COPIES.size:
        return 0
    return int(_COPIES.unpack_from(data, offset)[0])


def newest(records: Iterable[Record | None]) -> Record | None:
    """The winning version among replica answers; None where no replica holds the key."""
    return max(filter(None, records), default=None)  # a Record is never false: a tuple of five
