"""Garbage collection's background pass: scan the store in chunks, drop what the rule allows (tombstones and
expired versions no replica needs any more, and surplus copies: versions this node holds but no longer
owns, once their owners hold them), reclaim the space.

Every ``interval_s`` a pass reads the whole keyspace a chunk at a time, each chunk from its own iterator
(so no snapshot pins dropped records' space), yields to the event loop after every chunk and paces itself
to at most ``SCAN_RATE`` records a second, so client traffic is never starved. Each chunk's versions the
rule (kvnode.healing.gc_rule) allows to drop are deleted by one storage call that deletes a key only if
it still holds that very version (a write stored since the chunk was read wins) and tells the summaries.
At the end of a pass the span of the dropped keys is compacted in a worker thread: a LevelDB delete only
writes a marker, and the old versions' bytes go only when their range is compacted.

Before a version the rule allows goes, every other replica of its key is asked for its own version, and
the version is dropped only if each holds it, a newer one, or nothing. The rule's repair marks prove
that each replica received what this node held when a repair started; a tombstone that reached this node
later, by read repair or by an exchange with a third replica, is not covered by them, and a replica
still holding the value it deletes would give that value back once the tombstone is gone. Asking costs a
read per replica of each version about to be dropped, and nothing for the others.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kvnode.figures import Figure, Figures, Kind
from kvnode.healing.gc_rule import GcRule, Outcome
from kvnode.replica import Replica
from kvnode.replica.errors import ReplicaError
from kvnode.scheduling import Sleep, Slice, Tasks
from kvnode.storage.keyspace import Storage, StorageError
from kvnode.storage.records import CorruptRecord, Record, decode
from kvnode.storage.system_db import RepairMarks
from kvnode.topology.epoch import Epoch

__all__ = ["GC_FIGURES", "SCAN_RATE", "GarbageCollector", "GcCounts", "pass_interval_s"]

log = logging.getLogger(__name__)

SCAN_RATE = 20_000  # records read per second at most
_CHUNK = 1000  # records read between two yields to the event loop
_CONFIRM_WINDOW = 64  # versions whose replicas are asked at once before they are dropped


def pass_interval_s(grace_s: float) -> float:
    """How often a pass starts: a tenth of the grace period, so a version is dropped soon after it may
    be, but at least once an hour and at most once a second."""
    return min(3600.0, max(1.0, grace_s / 10))


@dataclass
class GcCounts:
    """What tombstone GC did since start, and what its last complete pass found waiting."""

    passes: int = 0  # complete passes
    tombstones_dropped: int = 0
    expired_dropped: int = 0  # versions whose TTL had run out
    # Past their grace but kept: some replica has not completed a repair with this node since. Both
    # from the last complete pass; by peer, how many wait for a repair with that peer.
    waiting: int = 0
    waiting_for: dict[str, int] = field(default_factory=dict)
    # Allowed by the rule but kept: a replica did not answer, or still held an older version.
    unconfirmed: int = 0
    unowned_dropped: int = 0  # versions this node no longer owned, dropped once their owners held them


_DROPPED = (
    "Versions tombstone GC dropped, by kind: tombstone, expired (a TTL that ran out), or unowned (a version "
    "this node no longer owned, once its owners held it)"
)
_WAITING = (
    "Tombstones and expired versions past the grace period, kept until every replica of their key has "
    "completed a repair with this node (as the last GC pass found)"
)

# GcCounts' figures (kvnode.figures).
GC_FIGURES = Figures("gc", (
    Figure("passes", Kind.COUNTER, "Tombstone GC passes over the store completed", "kvnode_gc_passes"),
    Figure("tombstones_dropped", Kind.COUNTER, _DROPPED, "kvnode_gc_dropped", label=("kind", "tombstone")),
    Figure("expired_dropped", Kind.COUNTER, _DROPPED, "kvnode_gc_dropped", label=("kind", "expired")),
    Figure("unowned_dropped", Kind.COUNTER, _DROPPED, "kvnode_gc_dropped", label=("kind", "unowned")),
    Figure("waiting", Kind.GAUGE, _WAITING, "kvnode_gc_waiting"),
    Figure("waiting_for", Kind.GAUGE, "Of those, how many wait for a repair with each peer (as the last GC "
           "pass found)", "kvnode_gc_waiting_for_repair", by="peer", every_peer=True),
    Figure("unconfirmed", Kind.COUNTER, "Versions the GC rule allowed but kept: another replica did not "
           "answer, or held an older version", "kvnode_gc_unconfirmed"),
))  # fmt: skip


class GarbageCollector:
    """Runs GC passes over ``storage`` in the background: tombstones, expired versions and surplus copies
    dropped as the rule (kvnode.healing.gc_rule) allows."""

    def __init__(
        self,
        storage: Storage,
        rule: GcRule,
        marks: RepairMarks,
        now: Callable[[], int],
        interval_s: float,
        replicas: Mapping[str, Replica],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.counts = GcCounts()
        self._replicas = replicas  # the other members, by URL, to confirm a drop with
        self._storage = storage
        self._rule = rule
        self._marks = marks
        self._now = now  # the hybrid clock's current time, for judging (not stamping)
        self._interval_s = interval_s
        self._tasks = Tasks("tombstone gc", sleep)
        self._compaction: asyncio.Future[None] | None = None

    def use(self, epoch: Epoch[Replica]) -> None:
        """Judge by another membership's rule, and confirm with its members, from the next key on."""
        self._rule, self._replicas = self._rule.following(epoch), epoch.peers

    def start(self) -> None:
        """Start the passes; call inside the running event loop."""
        self._tasks.spawn(self._run(), "passes")

    async def stop(self) -> None:
        """Stop the passes; waits for a compaction under way (storage must not close under it)."""
        await self._tasks.stop()
        if self._compaction is not None:
            await asyncio.gather(self._compaction, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._tasks.sleep(self._interval_s)
            try:
                await self.run_pass()
            except StorageError as error:
                log.error("tombstone GC pass failed, next in %.0f s: %s", self._interval_s, error)

    async def run_pass(self) -> None:
        """One pass over the whole store."""
        started = time.monotonic()
        counts, storage = self.counts, self._storage
        waiting_for: collections.Counter[str] = collections.Counter()
        waiting = 0
        dropped_before = counts.tombstones_dropped + counts.expired_dropped
        first: bytes | None = None
        last = b""
        start = b""
        share = Slice()  # judging a record costs tens of µs: a chunk of them would hold the loop too long
        while chunk := storage.read_chunk(start, _CHUNK):
            start = chunk[-1][0] + b"\x00"
            allowed: list[tuple[bytes, bytes, Record]] = []
            unowned: list[tuple[bytes, bytes, Record]] = []
            tombstones = set()
            now = self._now()
            for key, raw in chunk:
                await share.pause()  # safe: a version stored meanwhile is not dropped (Storage.drop)
                try:
                    record = decode(raw)
                except CorruptRecord:
                    continue  # a write heals it; GC leaves it be
                verdict = self._rule.judge(key, record, now=now, completed=self._marks.completed)
                if verdict.outcome is Outcome.DROP:
                    allowed.append((key, raw, record))
                    if record.tombstone:
                        tombstones.add(key)
                elif verdict.outcome is Outcome.WAIT:
                    waiting += 1
                    waiting_for.update(verdict.waiting_for)
                elif verdict.outcome is Outcome.UNOWNED:
                    unowned.append((key, raw, record))
            handed_over = storage.drop(await self._confirmed(unowned, self._held_by_owners))
            counts.unowned_dropped += len(handed_over)
            doomed = await self._confirmed(allowed, self._held_everywhere)
            dropped = storage.drop(doomed)  # drops only versions still stored as they were read
            if dropped:
                first = dropped[0] if first is None else first
                last = dropped[-1]
                dropped_tombstones = sum(1 for key in dropped if key in tombstones)
                counts.tombstones_dropped += dropped_tombstones
                counts.expired_dropped += len(dropped) - dropped_tombstones
            await self._tasks.sleep(len(chunk) / SCAN_RATE)
        counts.passes += 1
        counts.waiting = waiting
        counts.waiting_for = dict(waiting_for)
        if first is not None:
            await self._compact(first, last)
            log.info(
                "tombstone GC dropped %d versions, %d wait for a repair (%.1f s)",
                counts.tombstones_dropped + counts.expired_dropped - dropped_before, waiting,
                time.monotonic() - started,
            )  # fmt: skip

    async def _confirmed(
        self,
        allowed: list[tuple[bytes, bytes, Record]],
        held: Callable[[bytes, Record], Awaitable[bool]],
    ) -> list[tuple[bytes, bytes]]:
        """The (key, bytes) of the allowed versions that ``held`` confirms."""
        confirmed = []
        for start in range(0, len(allowed), _CONFIRM_WINDOW):
            window = allowed[start : start + _CONFIRM_WINDOW]
            answers = await asyncio.gather(*(held(key, record) for key, _, record in window))
            for (key, raw, _), confirms in zip(window, answers, strict=True):
                if confirms:
                    confirmed.append((key, raw))
                else:
                    self.counts.unconfirmed += 1
        return confirmed

    async def _held_everywhere(self, key: bytes, record: Record) -> bool:
        """Whether every other replica holds this version, a newer one, or none (a tombstone's drop)."""
        return await self._held(
            key, record, self._rule.other_replicas(key, record.copies) or (), absent_ok=True
        )

    async def _held_by_owners(self, key: bytes, record: Record) -> bool:
        """Whether every owner of the key holds this version or a newer one (an unowned version's drop);
        for a version that reads as absent, none will do too (an owner may have collected it)."""
        absent_ok = record.absent_at(self._now())
        return await self._held(key, record, self._rule.owners(key, record.copies), absent_ok=absent_ok)

    async def _held(self, key: bytes, record: Record, replicas: Sequence[str], *, absent_ok: bool) -> bool:
        if any(url not in self._replicas for url in replicas):
            return False
        versions = await asyncio.gather(
            *(self._replicas[url].read(key) for url in replicas), return_exceptions=True
        )
        for version in versions:
            if isinstance(version, ReplicaError):
                return False
            if isinstance(version, BaseException):
                raise version
            if version is None and not absent_ok:
                return False
            if version is not None and version < record:
                return False
        return True

    async def _compact(self, first: bytes, last: bytes) -> None:
        """Reclaim the dropped keys' space (first <= key <= last) in a worker thread; a stop waits for it."""
        self._compaction = asyncio.ensure_future(asyncio.to_thread(self._storage.compact, first, last))
        try:
            await asyncio.shield(self._compaction)
        finally:
            if self._compaction.done():
                self._compaction = None
