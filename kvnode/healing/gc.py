"""Garbage collection's background pass: scan the store in chunks, drop what the rule allows (tombstones and
expired versions no replica needs any more, and surplus copies: versions this node holds but no longer
owns, once their owners hold them), reclaim the space.

Every ``interval_s``, and once a membership change has settled (so that the surplus copies it left are
counted soon), a pass reads the whole keyspace a chunk at a time, each chunk from its own iterator (so no
snapshot pins dropped records' space), shares the event loop (:class:`kvnode.scheduling.Slice`), waits
while it is starved (kvnode.loop_lag.Starvation) and paces itself to at most ``SCAN_RATE`` records a
second, so client traffic is never starved. A cleanup (``admin cleanup``, :meth:`request_cleanup`) is the
same pass with the rule's cleanup mode, which lets a live surplus copy go without the grace period; its
progress is a :class:`kvnode.healing.cleanup_run.CleanupRun`. One pass runs at a time.

Each chunk's versions the rule (kvnode.healing.gc_rule) allows to drop are deleted by one storage call
that deletes a key only if it still holds that very version (a write stored since the chunk was read
wins) and tells the summaries. At the end of a pass the span of the dropped keys is compacted in a
worker thread: a LevelDB delete only writes a marker, and the old versions' bytes go only when their
range is compacted.

Before a version the rule allows goes, every other replica of its key is asked for its own version, and
the version is dropped only if each holds it, a newer one, or nothing (a surplus copy: only if each
owner holds it or a newer one). The rule's repair marks prove
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
from kvnode.healing.cleanup_run import CleanupRefused, CleanupRun
from kvnode.healing.gc_rule import GcRule, Outcome
from kvnode.loop_lag import Starvation
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
    surplus: int = 0  # versions this node holds but no longer owns, as its last complete pass left them


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
    Figure("surplus", Kind.GAUGE, "Surplus copies: versions of keys this node no longer owns (a member "
           "joined, or N shrank), kept until the grace period is over or admin cleanup drops them (as the "
           "last GC pass left them; a pass runs once a membership change settles)", "kvnode_gc_surplus"),
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
        starvation: Starvation | None = None,
    ) -> None:
        self.counts = GcCounts()
        self.cleanup: CleanupRun | None = None  # the last cleanup asked for, or the one running
        self._replicas = replicas  # the other members, by URL, to confirm a drop with
        self._storage = storage
        self._rule = rule
        self._marks = marks
        self._now = now  # the hybrid clock's current time, for judging (not stamping)
        self._interval_s = interval_s
        self._tasks = Tasks("tombstone gc", sleep)
        self._starvation = starvation if starvation is not None else Starvation()
        self._one_pass = asyncio.Lock()
        self._compaction: asyncio.Future[None] | None = None

    def use(self, epoch: Epoch[Replica]) -> None:
        """Judge by another membership's rule, and confirm with its members, from the next key on; once a
        change has settled, a pass (that counts the surplus copies it left)."""
        settles = epoch.settled_since is not None and epoch.settled_since != self._rule.settled_since
        self._rule, self._replicas = self._rule.following(epoch), epoch.peers
        if settles and self._tasks.running("passes") and not self._tasks.running("settled"):
            self._tasks.spawn(self._logged_pass("after a membership change"), "settled")

    def start(self) -> None:
        """Start the passes; call inside the running event loop."""
        self._tasks.spawn(self._run(), "passes")

    def request_cleanup(self) -> CleanupRun:
        """Start a cleanup (a pass that lets live surplus copies go without the grace period) unless one
        runs; the run, new or running. Refused while a membership change is under way (CleanupRefused):
        until it is over, a key's owners are not final."""
        if not self._tasks.running("cleanup"):
            if self._rule.settled_since is None:
                raise CleanupRefused(
                    "a membership change is under way (a member joining or leaving, or a new replication "
                    "factor): run cleanup once it is over"
                )
            self.cleanup = CleanupRun()
            self._tasks.spawn(self._clean(self.cleanup), "cleanup")
        assert self.cleanup is not None
        return self.cleanup

    async def _clean(self, run: CleanupRun) -> None:
        try:
            await self.run_pass(run)
        except StorageError as error:
            run.failed = str(error)
        run.ended = time.monotonic()
        log.info("cleanup: %s", run.summary())

    async def stop(self) -> None:
        """Stop the passes; waits for a compaction under way (storage must not close under it)."""
        await self._tasks.stop()
        if self._compaction is not None:
            await asyncio.gather(self._compaction, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._tasks.sleep(self._interval_s)
            await self._logged_pass(f"next in {self._interval_s:.0f} s")

    async def _logged_pass(self, then: str) -> None:
        try:
            await self.run_pass()
        except StorageError as error:
            log.error("tombstone GC pass failed, %s: %s", then, error)

    async def run_pass(self, cleanup: CleanupRun | None = None) -> None:
        """One pass over the whole store, after the one under way if any; with ``cleanup``, in the rule's
        cleanup mode (live surplus copies go without the grace period), telling the run what it does."""
        async with self._one_pass:
            await self._pass(cleanup)

    async def _pass(self, cleanup: CleanupRun | None) -> None:
        started = time.monotonic()
        counts, storage = self.counts, self._storage
        waiting_for: collections.Counter[str] = collections.Counter()
        waiting = surplus = 0
        dropped_before = counts.tombstones_dropped + counts.expired_dropped + counts.unowned_dropped
        span: list[bytes] = []  # the first and the last key dropped, to compact
        start = b""
        share = Slice()  # judging a record costs tens of µs: a chunk of them would hold the loop too long
        while chunk := storage.read_chunk(start, _CHUNK):
            await self._starvation.calm()
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
                verdict = self._rule.judge(
                    key, record, now=now, completed=self._marks.completed, cleanup=cleanup is not None
                )
                if verdict.outcome is Outcome.DROP:
                    allowed.append((key, raw, record))
                    if record.tombstone:
                        tombstones.add(key)
                elif verdict.outcome is Outcome.WAIT:
                    waiting += 1
                    waiting_for.update(verdict.waiting_for)
                elif verdict.outcome is Outcome.UNOWNED:
                    unowned.append((key, raw, record))
                elif verdict.outcome is Outcome.SURPLUS:
                    surplus += 1
                    if cleanup is not None and record.absent_at(now):
                        cleanup.kept_in_grace += 1
                    elif cleanup is not None:  # live: a change began since the cleanup started
                        cleanup.kept_for_change += 1
            handed_over = await self._drop(unowned, self._held_by_owners, cleanup)
            counts.unowned_dropped += len(handed_over)
            surplus += len(unowned) - len(handed_over)
            dropped = await self._drop(allowed, self._held_everywhere)
            dropped_tombstones = sum(1 for key in dropped if key in tombstones)
            counts.tombstones_dropped += dropped_tombstones
            counts.expired_dropped += len(dropped) - dropped_tombstones
            if handed_over or dropped:  # chunks come in key order: the first span found starts it
                span = [span[0] if span else min(handed_over + dropped), max(handed_over + dropped)]
            if cleanup is not None:
                cleanup.scanned += len(chunk)
            await self._tasks.sleep(len(chunk) / SCAN_RATE)
        counts.passes += 1
        counts.waiting = waiting
        counts.waiting_for = dict(waiting_for)
        counts.surplus = surplus
        if span:
            await self._compact(span[0], span[-1])
            log.info(
                "tombstone GC dropped %d versions, %d wait for a repair, %d surplus copies kept (%.1f s)",
                counts.tombstones_dropped + counts.expired_dropped + counts.unowned_dropped - dropped_before,
                waiting, surplus, time.monotonic() - started,
            )  # fmt: skip

    async def _drop(
        self,
        allowed: list[tuple[bytes, bytes, Record]],
        unconfirmed_by: Callable[[bytes, Record], Awaitable[tuple[str, ...]]],
        cleanup: CleanupRun | None = None,
    ) -> list[bytes]:
        """Drop the allowed versions that every replica ``unconfirmed_by`` asks confirms (it names those
        that do not); the keys dropped, in order. Only versions still stored as they were read go."""
        confirmed = []
        for start in range(0, len(allowed), _CONFIRM_WINDOW):
            window = allowed[start : start + _CONFIRM_WINDOW]
            answers = await asyncio.gather(*(unconfirmed_by(key, record) for key, _, record in window))
            for (key, raw, _), missing in zip(window, answers, strict=True):
                if not missing:
                    confirmed.append((key, raw))
                    continue
                self.counts.unconfirmed += 1
                if cleanup is not None:
                    cleanup.not_confirmed(missing)
        dropped = self._storage.drop(confirmed)
        if cleanup is not None:
            stored = dict(confirmed)
            cleanup.dropped += len(dropped)
            cleanup.bytes += sum(len(key) + len(stored[key]) for key in dropped)
        return dropped

    async def _held_everywhere(self, key: bytes, record: Record) -> tuple[str, ...]:
        """The other replicas that do not hold this version, a newer one, or none (a tombstone's drop)."""
        return await self._unconfirmed(
            key, record, self._rule.other_replicas(key, record.copies) or (), absent_ok=True
        )

    async def _held_by_owners(self, key: bytes, record: Record) -> tuple[str, ...]:
        """The owners of the key that do not hold this version or a newer one (an unowned version's drop);
        for a version that reads as absent, none will do too (an owner may have collected it)."""
        absent_ok = record.absent_at(self._now())
        return await self._unconfirmed(
            key, record, self._rule.owners(key, record.copies), absent_ok=absent_ok
        )

    async def _unconfirmed(
        self, key: bytes, record: Record, replicas: Sequence[str], *, absent_ok: bool
    ) -> tuple[str, ...]:
        """Those of ``replicas`` that do not confirm they hold the version (or a newer one, or none when
        ``absent_ok``): unreachable, not members of this node's membership, or holding less."""
        missing = [url for url in replicas if url not in self._replicas]
        if missing:
            return tuple(missing)
        versions = await asyncio.gather(
            *(self._replicas[url].read(key) for url in replicas), return_exceptions=True
        )
        for url, version in zip(replicas, versions, strict=True):
            if isinstance(version, BaseException) and not isinstance(version, ReplicaError):
                raise version
            if (
                isinstance(version, ReplicaError)
                or (version is None and not absent_ok)
                or (version is not None and version < record)
            ):
                missing.append(url)
        return tuple(missing)

    async def _compact(self, first: bytes, last: bytes) -> None:
        """Reclaim the dropped keys' space (first <= key <= last) in a worker thread; a stop waits for it."""
        self._compaction = asyncio.ensure_future(asyncio.to_thread(self._storage.compact, first, last))
        try:
            await asyncio.shield(self._compaction)
        finally:
            if self._compaction.done():
                self._compaction = None
