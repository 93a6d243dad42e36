"""Tombstone GC's background pass: scan the store in chunks, drop what the rule allows, reclaim the space.

Every ``interval_s`` a pass reads the whole keyspace a chunk at a time, each chunk from its own iterator
(so no snapshot pins dropped records' space), yields to the event loop after every chunk and paces itself
to at most ``SCAN_RATE`` records a second, so client traffic is never starved. Each chunk's versions the
rule (kvnode.repair.gc_rule) allows to drop are deleted by one storage call that deletes a key only if
it still holds that very version (a write stored since the chunk was read wins) and tells the summaries.
At the end of a pass the span of the dropped keys is compacted in a worker thread: a LevelDB delete only
writes a marker, and the old versions' bytes go only when their range is compacted.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kvnode.records import CorruptRecord, decode
from kvnode.repair.gc_rule import GcRule, Outcome
from kvnode.storage import Storage, StorageError
from kvnode.system_db import RepairMarks

__all__ = ["SCAN_RATE", "GcCounts", "TombstoneGc", "pass_interval_s"]

log = logging.getLogger(__name__)

SCAN_RATE = 20_000  # records read per second at most
_CHUNK = 1000  # records read between two yields to the event loop


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


class TombstoneGc:
    """Runs GC passes over ``storage`` in the background."""

    def __init__(
        self,
        storage: Storage,
        rule: GcRule,
        marks: RepairMarks,
        now: Callable[[], int],
        interval_s: float,
    ) -> None:
        self.counts = GcCounts()
        self._storage = storage
        self._rule = rule
        self._marks = marks
        self._now = now  # the hybrid clock's current time, for judging (not stamping)
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._compaction: asyncio.Future[None] | None = None

    def start(self) -> None:
        """Start the passes; call inside the running event loop."""
        self._task = asyncio.create_task(self._run(), name="tombstone gc")

    async def stop(self) -> None:
        """Stop the passes; waits for a compaction under way (storage must not close under it)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._compaction is not None:
            await asyncio.gather(self._compaction, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
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
        while chunk := storage.read_chunk(start, _CHUNK):
            start = chunk[-1][0] + b"\x00"
            doomed, tombstones = [], set()
            now = self._now()
            for key, raw in chunk:
                try:
                    record = decode(raw)
                except CorruptRecord:
                    continue  # a write heals it; GC leaves it be
                verdict = self._rule.judge(key, record, now=now, completed=self._marks.completed)
                if verdict.outcome is Outcome.DROP:
                    doomed.append((key, raw))
                    if record.tombstone:
                        tombstones.add(key)
                elif verdict.outcome is Outcome.WAIT:
                    waiting += 1
                    waiting_for.update(verdict.waiting_for)
            dropped = storage.drop(doomed)  # no await since the chunk's judgement
            if dropped:
                first = dropped[0] if first is None else first
                last = dropped[-1]
                dropped_tombstones = sum(1 for key in dropped if key in tombstones)
                counts.tombstones_dropped += dropped_tombstones
                counts.expired_dropped += len(dropped) - dropped_tombstones
            await asyncio.sleep(len(chunk) / SCAN_RATE)
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

    async def _compact(self, first: bytes, last: bytes) -> None:
        """Reclaim the dropped keys' space (first <= key <= last) in a worker thread; a stop waits for it."""
        self._compaction = asyncio.ensure_future(asyncio.to_thread(self._storage.compact, first, last))
        try:
            await asyncio.shield(self._compaction)
        finally:
            if self._compaction.done():
                self._compaction = None
