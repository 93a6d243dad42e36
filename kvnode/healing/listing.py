"""Listing the keys of some summary segments, a bounded page at a time: what a replica answers a LIST
call with, and what the repairing node reads of its own store, the same way.

Segments are a hash of the key, so their keys are spread over the whole keyspace: a listing walks the
keys in order (keys only; values are read for the keys of the segments asked) and a page stops after a
bounded number of keys walked or bytes listed, so one page never holds the event loop for long. The next
page starts after the page's cursor.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvnode.healing.summary import SEGMENTS, Summaries, key_segment, version_digest
from kvnode.storage.keyspace import Storage

__all__ = ["KEYS_PER_PAGE", "PAGE_BYTES", "in_bitmap", "list_page", "segment_bitmap"]

KEYS_PER_PAGE = 1024  # keys walked for one page at most: about a millisecond of the event loop
PAGE_BYTES = 64 * 1024  # listed bytes in one page at most (about)


def segment_bitmap(segments: Iterable[int]) -> bytes:
    """Bit i set for each segment i.

    >>> in_bitmap(segment_bitmap([3, 4000]), 4000), in_bitmap(segment_bitmap([3]), 4)
    (True, False)
    """
    bitmap = bytearray(SEGMENTS // 8)
    for segment in segments:
        bitmap[segment >> 3] |= 1 << (segment & 7)
    return bytes(bitmap)


def in_bitmap(bitmap: bytes, segment: int) -> bool:
    index = segment >> 3
    return index < len(bitmap) and bool(bitmap[index] & (1 << (segment & 7)))


def list_page(
    storage: Storage, summaries: Summaries, peer: str, cursor: bytes, bitmap: bytes
) -> tuple[bytes, list[tuple[bytes, int]]]:
    """(next cursor, [(key, version digest)]): the keys after ``cursor`` in the segments of ``bitmap``
    whose versions ``peer``'s tree covers; the next cursor is b"" after the last key."""
    keys = storage.keys_after(cursor, KEYS_PER_PAGE)
    entries: list[tuple[bytes, int]] = []
    size = 0
    for key in keys:
        if not in_bitmap(bitmap, key_segment(key)):
            continue
        record = storage.raw(key)
        if record is None or not summaries.shares(key, record, peer):
            continue
        entries.append((key, version_digest(key, record)))
        size += len(key) + 10
        if size >= PAGE_BYTES:
            return key, entries
    return (keys[-1] if len(keys) == KEYS_PER_PAGE else b""), entries
