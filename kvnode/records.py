"""Versioned records: what one key holds on a replica, its byte layout, and which of two versions wins.

A record is (timestamp, tombstone, value). Its field order *is* the ordering of versions, so plain tuple
comparison decides every conflict the same way on every node::

    >>> Record(5, False, b"a") < Record(5, True, b"")   # a tombstone wins a tie
    True
    >>> max(Record(5, False, b"a"), Record(5, False, b"b")).value   # then the greater bytes
    b'b'
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["CorruptRecord", "Record", "check", "decode", "encode", "newest"]

# timestamp (u64 microseconds, big-endian) + flags (u8); the value bytes follow.
_HEADER = struct.Struct(">QB")
_TOMBSTONE = 0x01


class CorruptRecord(ValueError):
    """Stored bytes that are not a record this codec wrote."""


class Record(NamedTuple):
    timestamp: int
    tombstone: bool
    value: bytes

    @classmethod
    def put(cls, timestamp: int, value: bytes) -> Record:
        return cls(timestamp, False, value)

    @classmethod
    def delete(cls, timestamp: int) -> Record:
        return cls(timestamp, True, b"")


def encode(record: Record) -> bytes:
    return _HEADER.pack(record.timestamp, _TOMBSTONE if record.tombstone else 0) + record.value


def decode(data: bytes) -> Record:
    timestamp, flags = _HEADER.unpack_from(check(data))
    return Record(timestamp, bool(flags), data[_HEADER.size :])


def check(data: bytes) -> bytes:
    """``data`` itself if it is an encoded record, else CorruptRecord: decode's checks without building
    the Record, for bytes passed on as they are (a replica answering a read)."""
    if len(data) < _HEADER.size:
        raise CorruptRecord(f"record is {len(data)} bytes, shorter than its {_HEADER.size}-byte header")
    flags = data[_HEADER.size - 1]
    if flags & ~_TOMBSTONE:
        raise CorruptRecord(f"record has unknown flags 0x{flags:02x}")
    if flags and len(data) != _HEADER.size:
        raise CorruptRecord("tombstone record carries a value")
    return data


def newest(records: Iterable[Record | None]) -> Record | None:
    """The winning version among replica answers; None where no replica holds the key."""
    return max((r for r in records if r is not None), default=None)
