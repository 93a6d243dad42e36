"""Versioned records: what one key holds on a replica, its byte layout, and which of two versions wins.

A record is (timestamp, tombstone, value, expires). Its field order *is* the ordering of versions, so
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
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["MAX_HEADER_BYTES", "CorruptRecord", "Record", "check", "decode", "encode", "newest"]

# timestamp (u64 microseconds, big-endian) + flags (u8); with _EXPIRES set the expiry (u64 microseconds)
# follows, then the value bytes. A record without an expiry keeps the layout it had before TTLs, so data
# dirs, hints and the replica wire written before stay valid.
_HEADER = struct.Struct(">QB")
_EXPIRY = struct.Struct(">Q")
_TOMBSTONE = 0x01
_EXPIRES = 0x02
MAX_HEADER_BYTES = _HEADER.size + _EXPIRY.size  # the most a record adds to its value


class CorruptRecord(ValueError):
    """Stored bytes that are not a record this codec wrote."""


class Record(NamedTuple):
    timestamp: int
    tombstone: bool
    value: bytes
    # Last so that a version without a TTL orders exactly as before TTLs: at a tie of the other fields an
    # expiring version wins over a permanent one, and the later expiry over the earlier.
    expires: int = 0

    @classmethod
    def put(cls, timestamp: int, value: bytes, *, ttl_us: int = 0) -> Record:
        return cls(timestamp, False, value, timestamp + ttl_us if ttl_us else 0)

    @classmethod
    def delete(cls, timestamp: int) -> Record:
        return cls(timestamp, True, b"")

    def restamped(self, timestamp: int) -> Record:
        """This version stamped ``timestamp`` instead, its TTL (if any) counted from the new timestamp."""
        if not self.expires:
            return self._replace(timestamp=timestamp)
        return self._replace(timestamp=timestamp, expires=timestamp + self.expires - self.timestamp)

    def expired_at(self, now: int) -> bool:
        """Whether this version's TTL has run out at ``now`` (the clock's microseconds)."""
        return 0 < self.expires <= now

    def absent_at(self, now: int) -> bool:
        """Whether this version reads as absent at ``now``: a tombstone, or expired, which behaves as one.

        Tombstone GC (issue 17, not built yet) hooks in here: it may drop a version absent at ``now``
        minus the grace period, an expired one like a tombstone."""
        return self.tombstone or self.expired_at(now)


def encode(record: Record) -> bytes:
    flags = (_TOMBSTONE if record.tombstone else 0) | (_EXPIRES if record.expires else 0)
    expiry = _EXPIRY.pack(record.expires) if record.expires else b""
    return _HEADER.pack(record.timestamp, flags) + expiry + record.value


def decode(data: bytes) -> Record:
    timestamp, flags = _HEADER.unpack_from(check(data))
    if flags & _EXPIRES:
        (expires,) = _EXPIRY.unpack_from(data, _HEADER.size)
        return Record(timestamp, False, data[MAX_HEADER_BYTES:], expires)
    return Record(timestamp, bool(flags), data[_HEADER.size :])


def check(data: bytes) -> bytes:
    """``data`` itself if it is an encoded record, else CorruptRecord: decode's checks without building
    the Record, for bytes passed on as they are (a replica answering a read)."""
    if len(data) < _HEADER.size:
        raise CorruptRecord(f"record is {len(data)} bytes, shorter than its {_HEADER.size}-byte header")
    flags = data[_HEADER.size - 1]
    if flags & ~(_TOMBSTONE | _EXPIRES):
        raise CorruptRecord(f"record has unknown flags 0x{flags:02x}")
    if flags == _TOMBSTONE and len(data) != _HEADER.size:
        raise CorruptRecord("tombstone record carries a value")
    if flags & _EXPIRES:
        if flags & _TOMBSTONE:
            raise CorruptRecord("tombstone record carries an expiry")
        if len(data) < MAX_HEADER_BYTES:
            raise CorruptRecord(f"record's expiry is truncated ({len(data) - _HEADER.size} of 8 bytes)")
        timestamp, _ = _HEADER.unpack_from(data)
        (expires,) = _EXPIRY.unpack_from(data, _HEADER.size)
        if expires <= timestamp:
            raise CorruptRecord(f"record expires at {expires}, not after its timestamp {timestamp}")
    return data


def newest(records: Iterable[Record | None]) -> Record | None:
    """The winning version among replica answers; None where no replica holds the key."""
    return max((r for r in records if r is not None), default=None)
