"""The streams of a membership change's STREAM step (kvnode.cluster.own_part): a leaving node's records to
their next owners (:func:`stream_leaving`), and the copies a new replication factor adds
(:func:`stream_copies`, the claimant's step of an ``admin replication-factor N``). Each tells the caller
how many records it wrote as it goes (``sent``): the caller owns the count.

For a new factor, every member's versions are read a page at a time (kvnode.coordinator.scan.page_sources,
this node's from its storage), and each version a member holds as an owner of its key under the present
factor is written, as a repair write (newest wins there), to the owners under the next factor that may
lack it: the owners the key gains (a larger N) and, from an owner the key loses (a smaller N), every
owner it keeps. So every owner under the next N holds each version any present owner held when the change
began; a write since then went to the owners under both factors (kvnode.topology.membership's write
placement).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

from kvnode.coordinator.scan import PageSource, entries, page_sources
from kvnode.replica import Replica
from kvnode.replica.channel import wire
from kvnode.replica.peer import PeerReplica
from kvnode.scheduling import Slice
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import copies_of, decode
from kvnode.topology.placement import Placement

__all__ = ["Sender", "stream_copies", "stream_leaving", "stream_new_copies"]

Sender = Callable[[bytes, bytes], Awaitable[object]]  # writes (key, encoded record) to one member
_WINDOW = 64  # versions written at once, or records a leaving node sends at once
_FIRST_KEY = b"\x00"  # no key sorts before it (a key has at least one byte)


async def stream_leaving(
    storage: Storage,
    before: Placement,
    after: Placement,
    peers: Mapping[str, PeerReplica],
    sent: Callable[[int], None],
) -> None:
    """Send every version this node holds to the owners its key gains from ``before`` (with this node) to
    ``after`` (without it): the next owner of each key this node owned, and no one for the keys it did not
    (newest wins on their side), telling ``sent`` how many were as they are. Raises ReplicaError,
    StorageError."""
    window: list[asyncio.Future[object]] = []
    share = Slice()  # keys that move nowhere await nothing: a long run of them would hold the loop
    for key, raw in storage.snapshot_records():
        await share.pause()
        copies = copies_of(raw)
        owners = before.owners(key, copies)
        for url in after.owners(key, copies):
            if url not in owners:
                window.append(peers[url].call(wire.Op.WRITE, key, raw, label="stream"))
        if len(window) >= _WINDOW:
            await asyncio.gather(*window)
            sent(len(window))
            window = []
    await asyncio.gather(*window)
    sent(len(window))


async def stream_copies(
    sources: Mapping[str, PageSource],
    before: Placement,
    after: Placement,
    senders: Mapping[str, Sender],
    sent: Callable[[int], None],
) -> None:
    """Read every member's versions from ``sources`` (by URL) and write each to the owners it needs under
    ``after`` (by ``senders``, by URL), telling ``sent`` how many were written as they are. Raises what a
    source or a sender raises (kvnode.replica.errors.ReplicaError, kvnode.storage.keyspace.StorageError):
    the step is then taken again, and what was written is written again (newest wins)."""
    window: list[Awaitable[object]] = []
    share = Slice()  # this node's pages are read with no await, and many keys need no write
    for url, fetch in sources.items():
        async for key, raw in entries(fetch, await fetch(_FIRST_KEY)):
            await share.pause()
            copies = copies_of(raw)
            owners = before.owners(key, copies)
            if url not in owners:
                continue  # held without owning the key (a join moved it): the owners' copies count
            kept = after.owners(key, copies)
            targets = [owner for owner in kept if owner not in owners] if url in kept else kept
            window += [senders[owner](key, raw) for owner in targets]
            if len(window) >= _WINDOW:
                await _written(window)
                sent(len(window))
                window = []
    await _written(window)
    sent(len(window))


async def _written(window: list[Awaitable[object]]) -> None:
    """Wait for every write of ``window``, then raise the first failure (each one retrieved: none is left
    for asyncio to log)."""
    for outcome in await asyncio.gather(*window, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome


async def stream_new_copies(
    own_url: str,
    storage: Storage,
    local: Replica,
    peers: Sequence[PeerReplica],
    before: Placement,
    after: Placement,
    sent: Callable[[int], None],
) -> None:
    """:func:`stream_copies` from every member (this node's ``storage``, the ``peers``' over their
    channels) to every member (this node as ``local``)."""

    async def write_here(key: bytes, raw: bytes) -> object:
        return await local.write(key, decode(raw))

    senders: dict[str, Sender] = {
        peer.url: partial(peer.call, wire.Op.WRITE, label="stream") for peer in peers
    }
    senders[own_url] = write_here
    await stream_copies(page_sources(own_url, storage, peers, None), before, after, senders, sent)
