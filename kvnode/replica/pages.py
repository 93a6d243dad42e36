"""Pages of a node's stored versions over a key range, for a cluster-wide scan (kvnode.coordinator.scan):
read from storage, and encoded for the replica channel (wire op SCAN, answered RECORDS). Tombstones and
expired versions are in them: a member's newer tombstone hides another's older value.

>>> page = encode_page([(b"a", b"rec-a"), (b"b", b"rec-b")], more=True)
>>> decode_page(page)
([(b'a', b'rec-a'), (b'b', b'rec-b')], True)
>>> decode_scan_request(encode_scan_request(b"z")), decode_scan_request(encode_scan_request(None))
(b'z', None)
"""

from __future__ import annotations

import struct

from kvnode.replica.channel.wire import FRAME_TARGET, WireError
from kvnode.storage.keyspace import Storage

__all__ = [
    "decode_page",
    "decode_scan_request",
    "encode_page",
    "encode_scan_request",
    "next_start",
    "read_page",
]

PAGE_RECORDS = 256
# A page ends once it holds this many bytes (a record alone may be larger: a page holds at least one), so
# a reply stays within what one message of the channel may carry.
PAGE_BYTES = FRAME_TARGET
_ENTRY = struct.Struct(">HI")  # key length, record length

Page = tuple[list[tuple[bytes, bytes]], bool]  # (key, encoded record) in key order, and whether more follow


def read_page(storage: Storage, start: bytes, end: bytes | None) -> Page:
    """The stored versions with start <= key < end (no end: to the last key), the first page of them.
    Raises kvnode.storage.keyspace.StorageError."""
    chunk = storage.read_chunk(start, PAGE_RECORDS)
    entries: list[tuple[bytes, bytes]] = []
    size = 0
    for key, raw in chunk:
        if end is not None and key >= end:
            return entries, False
        if entries and size + len(key) + len(raw) > PAGE_BYTES:
            return entries, True
        entries.append((key, raw))
        size += len(key) + len(raw)
    return entries, len(chunk) == PAGE_RECORDS


def next_start(page: Page) -> bytes:
    """Where the page after ``page`` (one that has more after it) starts: just after its last key."""
    return page[0][-1][0] + b"\x00"


def encode_scan_request(end: bytes | None) -> bytes:
    return b"" if end is None else b"\x01" + end


def decode_scan_request(record: bytes) -> bytes | None:
    if not record:
        return None
    if record[:1] != b"\x01":
        raise WireError("a SCAN request is empty or starts with 1")
    return record[1:]


def encode_page(entries: list[tuple[bytes, bytes]], more: bool) -> bytes:
    parts = [b"\x01" if more else b"\x00"]
    for key, raw in entries:
        parts += [_ENTRY.pack(len(key), len(raw)), key, raw]
    return b"".join(parts)


def decode_page(payload: bytes) -> Page:
    """Raises WireError for anything :func:`encode_page` did not make."""
    if not payload or payload[0] > 1:
        raise WireError("a page starts with whether more follow")
    entries, offset = [], 1
    while offset < len(payload):
        if len(payload) - offset < _ENTRY.size:
            raise WireError("a page ends inside an entry header")
        key_len, raw_len = _ENTRY.unpack_from(payload, offset)
        offset += _ENTRY.size
        end = offset + key_len + raw_len
        if end > len(payload):
            raise WireError("a page's entry runs past its end")
        entries.append((payload[offset : offset + key_len], payload[offset + key_len : end]))
        offset = end
    return entries, payload[0] == 1
