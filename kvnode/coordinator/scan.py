"""A cluster-wide range scan: every live key of [start, end) once, with its newest version, in key order,
merged from the members' pages of stored versions (kvnode.replica.pages).

A k-way merge (a heap of each member's next key) that holds one page per member at a time, never the
range. A version counts only from a member that owns its key (the first N of its placement order): one a
member holds without owning it (a join moved the key) may be older than a tombstone the owners dropped.
A member that does not answer its first page is left out; the scan needs fewer than N members left out,
so that every key keeps an owner that answered (else :class:`ScanUnavailable`). A member that fails later
fails the scan (ReplicaError): which of its keys were missed is not known.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence

from kvnode.replica import pages
from kvnode.replica.channel import wire
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.storage.keyspace import Storage, StorageError
from kvnode.storage.records import CorruptRecord, Record, decode, newest

__all__ = ["PageSource", "ScanUnavailable", "entries", "merged", "page_sources"]

PageSource = Callable[[bytes], Awaitable[pages.Page]]  # a member's page starting at a key


def page_sources(
    own_url: str, storage: Storage, peers: Iterable[PeerReplica], end: bytes | None
) -> dict[str, PageSource]:
    """How to read a page of each member's versions up to ``end`` (None: the last key): this node's from
    its storage, a peer's over the replica channel."""
    request = pages.encode_scan_request(end)

    async def local(start: bytes) -> pages.Page:
        return pages.read_page(storage, start, end)

    def remote(peer: PeerReplica) -> PageSource:
        async def fetch(start: bytes) -> pages.Page:
            payload = await peer.call(wire.Op.SCAN, start, request, label="scan")
            assert isinstance(payload, bytes)
            return pages.decode_page(payload)

        return fetch

    return {own_url: local, **{peer.url: remote(peer) for peer in peers}}


class ScanUnavailable(Exception):
    """Too many members did not answer for every key to have an owner that did; one line naming them."""


async def merged(
    sources: Mapping[str, PageSource],
    start: bytes,
    owners: Callable[[bytes], Sequence[str]],
    replication: int,
    now: int,
) -> AsyncIterator[tuple[bytes, bytes]]:
    """(key, value) of each live key from ``start`` on (the sources stop at the range's end), newest
    version first found among the key's ``owners`` that answered. Raises ScanUnavailable, ReplicaError."""
    firsts = await asyncio.gather(*(fetch(start) for fetch in sources.values()), return_exceptions=True)
    streams: dict[str, AsyncIterator[tuple[bytes, bytes]]] = {}
    down = []
    for (url, fetch), first in zip(sources.items(), firsts, strict=True):
        if isinstance(first, ReplicaError | StorageError):
            down.append(url)
        elif isinstance(first, BaseException):
            raise first
        else:
            streams[url] = entries(fetch, first)
    if len(down) >= replication:
        raise ScanUnavailable(f"{len(down)} members did not answer, N={replication}: {', '.join(down)}")
    heap: list[tuple[bytes, str, bytes]] = []
    for url, stream in streams.items():
        await _push(heap, url, stream)
    while heap:
        key = heap[0][0]
        versions: list[Record] = []
        while heap and heap[0][0] == key:
            _, url, raw = heapq.heappop(heap)
            if url in owners(key):
                versions.extend(_decoded(raw))
            await _push(heap, url, streams[url])
        record = newest(versions)
        if record is not None and not record.absent_at(now):
            yield key, record.value


async def entries(fetch: PageSource, page: pages.Page) -> AsyncIterator[tuple[bytes, bytes]]:
    """A member's (key, encoded record) in key order, a page at a time."""
    while True:
        for entry in page[0]:
            yield entry
        if not page[1] or not page[0]:
            return
        page = await fetch(pages.next_start(page))


async def _push(
    heap: list[tuple[bytes, str, bytes]], url: str, stream: AsyncIterator[tuple[bytes, bytes]]
) -> None:
    entry = await anext(stream, None)
    if entry is not None:
        heapq.heappush(heap, (entry[0], url, entry[1]))


def _decoded(raw: bytes) -> list[Record]:
    try:
        return [decode(raw)]
    except CorruptRecord:
        return []  # another owner's version stands; anti-entropy heals this one
