"""Hinted handoff: writes a replica missed, kept durably by the coordinator and delivered when it is back.

As in Cassandra: one ordered log per target node (here in the hints part of the node's system database,
kvnode.storage.system_db, never the client keyspace), bounded per target, with a hint window: no new hints for
a replica down longer than the window, and hints older than the window are dropped at delivery, and so are
hints whose record is older than the tombstone GC's grace period, which a dropped tombstone could no
longer beat (docs/gc.md; the hint window is at most the grace period, so this is a second guard), and,
once a membership change has settled, hints whose target no longer owns their key: delivered, such a
hint would put back a surplus copy that ``admin cleanup`` dropped, one no tombstone on that node beats.
One task per peer delivers its hints in order, a batch at a time, at a throttled rate, whenever the peer
is reachable; it also connects its peer at start.

    >>> import tempfile, pathlib
    >>> tmp = tempfile.TemporaryDirectory()
    >>> from kvnode.storage.system_db import SystemDb
    >>> system = SystemDb.open(pathlib.Path(tmp.name))
    >>> store = HintStore(system.hints, fsync=False, max_per_peer=1000, window_s=10800, grace_s=864000)
    >>> store.add("http://b:8080", b"k", Record.put(7, b"v"), down_for=0.0)   # its sequence number
    1
    >>> store.pending("http://b:8080")
    1
    >>> system.close(); tmp.cleanup()
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol

import plyvel

from kvnode.figures import Figure, Figures, Kind
from kvnode.loop_lag import Starvation
from kvnode.memory import Settler
from kvnode.replica.errors import ReplicaError, ReplicaSkewRefused
from kvnode.storage.records import Record, decode, encode
from kvnode.topology.epoch import Epoch
from kvnode.topology.placement import Placement

__all__ = ["HINT_FIGURES", "Hint", "HintDelivery", "HintStore", "HintTarget"]

log = logging.getLogger(__name__)

_SEQ = struct.Struct(">Q")
_VALUE = struct.Struct(">QI")  # created (wall ms) | key length; the key and the encoded record follow
_BATCH = 64  # hints sent in one frame
_BATCH_BYTES = 4 * 1024 * 1024  # and at most about this many bytes of them (one hint is always taken)
_RETRY_S = 0.25  # how often an unreachable peer with hints is probed
# A peer that keeps failing its hints (a full disk refuses them) is sent them again after a pause that
# doubles from _RETRY_S up to this, so that it is not sent the same batch four times a second.
_MAX_PAUSE_S = 4.0


class Hint(NamedTuple):
    seq: int
    created_ms: int
    key: bytes
    record: Record


# A HintStore's figures (kvnode.figures).
HINT_FIGURES = Figures("hints", (
    Figure("pending_by_target", Kind.GAUGE, "Hints waiting for delivery, by target", "kvnode_hints_pending",
           key="pending", by="peer", every_peer=True),
    Figure("kept", Kind.COUNTER, "Hints kept since start, by target", "kvnode_hints_kept", by="peer",
           every_peer=True),
    Figure("delivered", Kind.COUNTER, "Hints delivered since start, by target", "kvnode_hints_delivered",
           by="peer", every_peer=True),
    Figure("dropped", Kind.COUNTER, "Hints not kept or dropped undelivered: window (target down too long), "
           "expired (older than the window), grace (record older than the GC grace period), full, refused "
           "(for clock skew), storage, member (the target is no longer a member), unowned (the target no "
           "longer owns the key)", "kvnode_hints_dropped",
           by="reason"),
))  # fmt: skip


class HintStore:
    def __init__(
        self,
        log: plyvel.DB,
        *,
        fsync: bool,
        max_per_peer: int,
        window_s: float,
        grace_s: float,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._db = log  # target | NUL | seq -> a hint; SystemDb.hints, whose prefix keeps it apart
        self._fsync = fsync
        self.max_per_peer = max_per_peer
        self.window_ms = int(window_s * 1000)
        self.grace_ms = int(grace_s * 1000)
        self._wall_ms = wall_ms
        self._pending: collections.Counter[str] = collections.Counter()
        self.kept: collections.Counter[str] = collections.Counter()  # by target, since start
        self.dropped: collections.Counter[str] = collections.Counter()  # by reason
        self.delivered: collections.Counter[str] = collections.Counter()  # by target
        self._added: dict[str, asyncio.Event] = {}
        self._seq = 0
        self._settled: Placement | None = None  # the membership's placement while no change is under way
        for raw_key in self._db.iterator(include_value=False):  # target | NUL | seq
            self._pending[raw_key[: -_SEQ.size - 1].decode()] += 1
            self._seq = max(self._seq, _SEQ.unpack(raw_key[-_SEQ.size :])[0])

    def add(self, target: str, key: bytes, record: Record, *, down_for: float) -> int:
        """Keep ``record`` for ``target``; its sequence number (from 1), or 0 when it is not kept: the
        target has been down longer than the hint window, or its hints are at the cap (both counted)."""
        if down_for * 1000 > self.window_ms:
            self.dropped["window"] += 1
            return 0
        if self._pending[target] >= self.max_per_peer:
            self.dropped["full"] += 1
            return 0
        self._seq += 1
        value = _VALUE.pack(self._wall_ms(), len(key)) + key + encode(record)
        try:
            self._db.put(_hint_key(target, self._seq), value, sync=self._fsync)
        except plyvel.Error as error:
            log.error("cannot keep a hint for %s: %s", target, error)
            self.dropped["storage"] += 1
            return 0
        self._pending[target] += 1
        self.kept[target] += 1
        event = self._added.get(target)
        if event is not None:
            event.set()
        return self._seq

    def remove(self, target: str, seqs: Iterable[int]) -> None:
        """Forget hints that reached their target. A hint may be removed twice (delivered by the delivery
        task while the write it stands for succeeded after all), so only the ones still there count (and
        the one looked up is not cached, as in ``oldest``)."""
        removed = 0
        with self._db.write_batch() as batch:
            for seq in seqs:
                key = _hint_key(target, seq)
                if self._db.get(key, fill_cache=False) is not None:
                    batch.delete(key)
                    removed += 1
        self._pending[target] -= removed

    def forget(self, target: str) -> int:
        """Drop every hint for ``target``, no longer a member (its replacement rebuilds from the replicas
        that took the writes); how many there were, counted as dropped ("member")."""
        with self._db.write_batch() as batch:
            for raw_key in self._db.iterator(prefix=target.encode() + b"\x00", include_value=False):
                batch.delete(raw_key)
        dropped, self._pending[target] = self._pending[target], 0
        self.dropped["member"] += dropped
        return dropped

    def pending(self, target: str) -> int:
        return self._pending[target]

    def pending_by_target(self) -> dict[str, int]:
        return {target: count for target, count in self._pending.items() if count}

    def oldest(self, target: str, limit: int, max_bytes: int = 1 << 62) -> list[Hint]:
        """Up to ``limit`` of the target's oldest hints, stopping once they hold ``max_bytes``."""
        prefix = target.encode() + b"\x00"
        hints = []
        # A hint is read to be delivered, not read again: LevelDB's block cache would keep each large one
        # (its shards evict only when another block comes in) long after delivery.
        for raw_key, value in self._db.iterator(prefix=prefix, fill_cache=False):
            created_ms, key_len = _VALUE.unpack_from(value)
            key_end = _VALUE.size + key_len
            seq = _SEQ.unpack(raw_key[len(prefix) :])[0]
            hints.append(Hint(seq, created_ms, value[_VALUE.size : key_end], decode(value[key_end:])))
            max_bytes -= len(value)
            if len(hints) == limit or max_bytes <= 0:
                break
        return hints

    def use(self, epoch: Epoch[object]) -> None:
        """Judge the hints by this membership from now on (kvnode.cluster.members tells each one)."""
        self._settled = None if epoch.settled_since is None else epoch.placement

    def stale(self, hint: Hint, target: str) -> str | None:
        """Why ``hint`` for ``target`` must be dropped undelivered, if it must: "expired", kept longer
        than the hint window; "grace", its record older than the GC grace period; "unowned", the target
        no longer owns its key and no change is under way (its owners took the write or have hints of
        their own). None: deliver it."""
        now_ms = self._wall_ms()
        if now_ms - hint.created_ms > self.window_ms:
            return "expired"
        if now_ms - hint.record.timestamp // 1000 > self.grace_ms:
            return "grace"
        settled = self._settled
        if settled is not None and target not in settled.owners(hint.key, hint.record.copies):
            return "unowned"
        return None

    def added_event(self, target: str) -> asyncio.Event:
        """Set whenever a hint for ``target`` is kept (the delivery task waits on it)."""
        return self._added.setdefault(target, asyncio.Event())


def _hint_key(target: str, seq: int) -> bytes:
    return target.encode() + b"\x00" + _SEQ.pack(seq)


class HintTarget(Protocol):
    """What hint delivery uses of a peer (kvnode.replica.peer.PeerReplica)."""

    url: str
    became_connected: asyncio.Event

    @property
    def connected(self) -> bool: ...

    def probe(self) -> None:
        """Start a connect attempt unless connected or one is under way."""

    def deliver_hint(self, key: bytes, record: Record) -> asyncio.Future[int | None]: ...


class HintDelivery:
    """Delivers one peer's hints in order, ``rate`` hints a second at most, whenever it is reachable."""

    def __init__(
        self, store: HintStore, peer: HintTarget, rate: float, settler: Settler, starvation: Starvation
    ) -> None:
        self._store = store
        self._peer = peer
        self._rate = rate
        self._settler = settler  # told the bytes delivered: hints of large values are large too
        self._starvation = starvation  # while the loop is busy, client requests go first
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        store, peer = self._store, self._peer
        added = store.added_event(peer.url)
        # Connect at start, so the first writes find the channel open and keep no hint for a healthy peer
        # (a write to a replica not connected at dispatch is hinted before the client is answered).
        while not await self._reachable():
            pass
        pause = _RETRY_S
        while True:
            if not store.pending(peer.url):
                added.clear()
                await added.wait()
                continue
            if not await self._reachable():
                continue
            await self._starvation.calm()
            sent = await self._deliver_batch()
            if sent is None:  # the peer failed or refused some mid-delivery; try again after a pause
                await asyncio.sleep(pause)
                pause = min(2 * pause, _MAX_PAUSE_S)
                continue
            pause = _RETRY_S
            if sent:
                await asyncio.sleep(sent / self._rate)

    async def _reachable(self) -> bool:
        """Whether the peer is connected, after starting a connect attempt and waiting up to _RETRY_S for
        it when it was not."""
        peer = self._peer
        if peer.connected:
            return True
        peer.probe()
        try:
            async with asyncio.timeout(_RETRY_S):
                await peer.became_connected.wait()
        except TimeoutError:
            return False
        return True

    async def _deliver_batch(self) -> int | None:
        """Send the oldest hints; the number sent, or None when the peer failed some of them."""
        store, url = self._store, self._peer.url
        hints = store.oldest(url, _BATCH, _BATCH_BYTES)
        live, stale = [], []
        for hint in hints:
            reason = store.stale(hint, url)
            if reason is None:
                live.append(hint)
            else:
                store.dropped[reason] += 1
                stale.append(hint.seq)
        if stale:
            store.remove(url, stale)
        outcomes = await asyncio.gather(
            *(self._peer.deliver_hint(hint.key, hint.record) for hint in live), return_exceptions=True
        )
        done: list[int] = []
        failed: list[ReplicaError] = []
        for hint, outcome in zip(live, outcomes, strict=True):
            if isinstance(outcome, ReplicaSkewRefused):
                store.dropped["refused"] += 1  # it would be refused again
                done.append(hint.seq)
            elif isinstance(outcome, ReplicaError):
                failed.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                store.delivered[url] += 1
                done.append(hint.seq)
                self._settler.passed(len(hint.record.value))
        store.remove(url, done)
        if failed:
            log.info(
                "hint delivery to %s paused: %d of %d failed (%s)", url, len(failed), len(live), failed[0]
            )
            return None
        return len(live)
