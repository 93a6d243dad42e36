"""The coordinator: turns a client's GET/PUT/DELETE into replica calls and a quorum verdict.

It picks the key's replicas (placement: the owners in this node's datacenter first), stamps writes with the
node's hybrid logical clock, hands the calls to the fan-out strategy the node runs with, and merges read
answers (the newest version wins). A request's quorum is ack/from by number or a consistency level by name
(kvnode.coordinator.quorum), over the owners in each datacenter as this node's placement counts them.
Around the verdict it keeps the replicas converging: a write that a replica missed becomes a hint
(kvnode.replica.hints), a read that found stale replicas repairs them (kvnode.coordinator.read_repair), and a
write that lost to a newer version on a replica is stamped again past it and rewritten, once. A node whose
clock is fenced (kvnode.clocks.fence) refuses to coordinate writes: ClockFenced.

Across datacenters a write crosses to each other one once: one owner there is sent it and forwards it to
the others (kvnode.coordinator.forwarding), each owner still counted, hinted and answered on its own; and
this node forwards what a coordinator elsewhere sends it so (its ``register``). A cluster of one
datacenter writes to every owner itself, on the very path it always did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol, TypeVar

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock
from kvnode.coordinator.fanout import Fanout, Patient
from kvnode.coordinator.forwarding import ForwardBatch, Relay
from kvnode.coordinator.forwards import crossings
from kvnode.coordinator.quorum import Quorum
from kvnode.coordinator.read_repair import ReadRound
from kvnode.figures import Figure, Figures, Kind
from kvnode.replica import Answered, Replica
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.errors import ReplicaError, ReplicaSkewRefused, keeps_hint
from kvnode.replica.hints import HintStore
from kvnode.storage.records import Record, encode, newest
from kvnode.topology.epoch import Epoch
from kvnode.topology.placement import Placement

__all__ = ["COORDINATOR_FIGURES", "Coordinator", "CoordinatorStats", "Ranked", "nearest_first"]

log = logging.getLogger(__name__)

_SKEW_LOG_EVERY_S = 10.0
_QUORUMS_KEPT = 64  # the ack and from pairs whose quorums a coordinator keeps parsed
# A remote replica is slow when its recent p99 is over twice the fastest remote's, plus a millisecond so
# that noise between healthy peers reorders nothing: Cassandra's dynamic snitch with a badness threshold.
# Replicas about as fast as the fastest keep placement order, so their read load stays spread.
_SLOW_FACTOR = 2.0
_SLOW_MARGIN_S = 0.001


@dataclass(slots=True)
class CoordinatorStats:
    rewrites: int = 0  # writes stamped again because a replica held a newer version
    read_repairs: int = 0  # repair writes sent to stale replicas
    skew_refusals: int = 0  # replica writes refused because this node's clock runs too far ahead
    last_skew_log: float = 0.0


# CoordinatorStats' figures (kvnode.figures).
COORDINATOR_FIGURES = Figures("coordinator", (
    Figure("rewrites", Kind.COUNTER, "Writes stamped again because a replica held a newer version",
           "kvnode_rewrites"),
    Figure("read_repairs", Kind.COUNTER, "Repair writes sent to stale replicas", "kvnode_read_repairs"),
    Figure("skew_refusals", Kind.COUNTER, "Replica writes refused because this node's clock runs ahead",
           "kvnode_skew_refusals"),
))  # fmt: skip


@dataclass(frozen=True, slots=True)
class _DispatchHint:
    """What became of the hint for one replica's write when it was sent: ``asked`` when the replica was
    not connected then (so a later failure keeps no second hint), and the kept hint's sequence number
    (None when the store did not keep it: window or cap), to remove if the write succeeds after all."""

    asked: bool
    kept_seq: int | None


_NOT_HINTED = _DispatchHint(asked=False, kept_seq=None)


class Coordinator:
    def __init__(
        self,
        epoch: Epoch[Replica],
        fanout: Fanout,
        clock: HybridClock,
        hints: HintStore,
        local: Replica,
        fence: ClockFence,
    ) -> None:
        self._local = local
        self._fanout = fanout
        self._clock = clock
        self._hints = hints
        self._fence = fence
        self.stats = CoordinatorStats()
        self._relay = Relay(self._replica_at, clock.observe)
        # Bound once, not on every read.
        self._observe, self._on_repair = clock.observe, self._count_repair
        self.use(epoch)

    def use(self, epoch: Epoch[Replica]) -> None:
        """Place keys on another membership's replicas from the next request on: writes by the epoch's
        placement, reads by its read placement while members join."""
        self.placement = epoch.placement  # where keys are written
        self._reads = epoch.read_placement  # where they are read, while members join (None: placement)
        self._replicas: Mapping[str, Replica] = {self._local.url: self._local, **epoch.peers}
        self._replica_of = self._replicas.__getitem__  # mapped over a key's owners in C: no frame per key
        # Every member's datacenter, a member leaving included (a write's target, but not in placement).
        self._datacenter_of = epoch.membership.datacenter_of
        self._crossing = len(epoch.placement.datacenters) > 1  # writes forwarded to other datacenters
        # The owners of a key, N (or every member while there are fewer), as reads count them: the most a
        # request's ``from`` may be.
        self._replication = self.owning.replication
        self._quorums: dict[tuple[str | None, str | None, bool], Quorum] = {}  # Quorum.parse's, as asked

    def register(self, answerers: Answerers) -> None:
        """Forward what a coordinator in another datacenter sends this node so (FORWARD)."""
        self._relay.register(answerers)

    def _replica_at(self, url: str) -> Replica | None:
        return self._replicas.get(url)

    @property
    def owning(self) -> Placement:
        """Where keys are read: their present owners (while a member joins, not it)."""
        return self._reads or self.placement

    def quorum(self, ack: str | None, copies: str | None, *, read: bool = False) -> Quorum:
        """A request's quorum from its ``ack`` and ``from`` (raises BadQuorum), over a key's present
        owners in each datacenter, this node's first."""
        # Nearly every request asks one of a few: each parsed once per epoch, not once per request.
        asked = (ack, copies, read)
        quorum = self._quorums.get(asked)
        if quorum is None:
            quorum = Quorum.parse(ack, copies, self.owning.owners_by_datacenter, read=read)
            if len(self._quorums) >= _QUORUMS_KEPT:  # what clients ask is theirs: keep a bounded few
                self._quorums.clear()
            self._quorums[asked] = quorum
        return quorum

    async def get(self, key: bytes, quorum: Quorum) -> Record | None:
        """The newest version among ack replicas (a tombstone or an expired one included: it still hides
        older versions and read repair spreads it); None where none holds the key."""
        read = ReadRound(key, self._observe, self._on_repair)
        replicas = self._replicas_for(key, quorum)
        if self._fanout.nearest_first:
            replicas = nearest_first(replicas, self._local)
        try:
            groups = self._groups(quorum, replicas) if quorum.groups else ()
            answers = await self._fanout.read(read, replicas, quorum, groups)
        finally:
            read.close()
        return newest(answers)

    # put and delete are no coroutines of their own while the fence is ready (nearly always): the caller
    # awaits the write itself, one coroutine layer less on every write.

    def put(self, key: bytes, value: bytes, quorum: Quorum, ttl_ms: int | None = None) -> Awaitable[Record]:
        """Write value; with ``ttl_ms`` it expires that long after the write's timestamp. The version
        written; raises ClockFenced (nothing written) while this node's clock is fenced."""
        ttl_us = 0 if ttl_ms is None else ttl_ms * 1000
        copies = self._copies(quorum)
        if not self._fence.ready:
            return self._admitted(key, quorum, partial(Record.put, value=value, ttl_us=ttl_us, copies=copies))
        return self._write(key, Record.put(self._clock.now(), value, ttl_us=ttl_us, copies=copies), quorum)

    def delete(self, key: bytes, quorum: Quorum) -> Awaitable[Record]:
        """The tombstone written; raises ClockFenced (nothing written) while this node's clock is fenced."""
        copies = self._copies(quorum)
        if not self._fence.ready:
            return self._admitted(key, quorum, partial(Record.delete, copies=copies))
        return self._write(key, Record.delete(self._clock.now(), copies=copies), quorum)

    async def _admitted(self, key: bytes, quorum: Quorum, stamp: Callable[[int], Record]) -> Record:
        """The version ``stamp`` makes of a timestamp, written once the fence has judged this node's clock
        (raises ClockFenced, nothing written, when it refuses), and only then stamped."""
        await self._fence.admit_write()
        return await self._write(key, stamp(self._clock.now()), quorum)

    def owners_quorum(self, record: Record) -> Quorum:
        """Every owner of a version written to ``record.copies`` replicas (0: all N), all to answer."""
        size = self._replication
        owners = min(record.copies, size) if record.copies else size
        return Quorum(owners, owners)

    async def write_version(self, key: bytes, record: Record) -> bool:
        """Write ``record`` as it is, its own timestamp kept (a restore, kvnode.node.versions_api), to
        every owner of its key, each keeping the newer of it and what it holds, as read repair's writes
        do: never stamped again. True when an owner took it, False when every one holds a newer version.
        Raises ClockFenced (nothing written) while this node's clock is fenced, QuorumFailed unless every
        owner answered (those that did not get hints)."""
        if not self._fence.ready:
            await self._fence.admit_write()
        self._clock.observe(record.timestamp)  # so that this node's later writes of the key are newer
        replicas, quorum = self._write_targets(key, self.owners_quorum(record))
        answers = await self._write_to(replicas, key, record, quorum)
        return any(held is None for held in answers)

    def _copies(self, quorum: Quorum) -> int:
        """What a record says of its replicas: their count when fewer than the key's owners, else 0."""
        return quorum.copies if quorum.copies < self._replication else 0

    async def _write(self, key: bytes, record: Record, quorum: Quorum) -> Record:
        """The version written: ``record``, or it stamped again when it lost."""
        replicas, quorum = self._write_targets(key, quorum)
        answers = await self._write_to(replicas, key, record, quorum)
        if answers.count(None) == len(answers):  # nearly every write: no replica held a newer version
            return record
        held = max(timestamp for timestamp in answers if timestamp is not None)
        # A replica holds a newer version than this write: move past it and write again, once, to all
        # `from` replicas. That second write's answers decide; a replica still holding a newer version
        # then lost to a concurrent write, which LWW allows.
        self._clock.observe(held)
        self.stats.rewrites += 1
        rewritten = record.restamped(self._clock.now())
        await self._write_to(replicas, key, rewritten, quorum)
        return rewritten

    def _write_to(
        self, replicas: list[Replica], key: bytes, record: Record, quorum: Quorum
    ) -> Awaitable[list[int | None]]:
        """The fan-out writing ``record`` to ``replicas``, through a forwarder in each other datacenter
        where one can (kvnode.coordinator.forwards)."""
        batches = self._forward_batches(replicas, key, record) if self._crossing else None
        round_ = _Write(self, key, record) if not batches else _ForwardedWrite(self, key, record, batches)
        groups = self._groups(quorum, replicas) if quorum.groups else ()
        return self._fanout.write(round_, replicas, quorum, groups)

    def _groups(self, quorum: Quorum, replicas: list[Replica]) -> Sequence[int]:
        """Each replica's datacenter among ``quorum``'s groups (NO_GROUP where it counts none apart), for a
        quorum that counts some apart (the usual one counts none: asked nothing on the request path)."""
        return [quorum.group_of(self._datacenter_of(replica.url)) for replica in replicas]

    def _forward_batches(
        self, replicas: list[Replica], key: bytes, record: Record
    ) -> dict[str, ForwardBatch]:
        """The forward batch of each replica written through its datacenter's forwarder, by URL (none when
        no other datacenter's owners have a forwarder that can)."""
        batches: dict[str, ForwardBatch] = {}
        for targets in crossings(replicas, self._datacenter_of, self.placement.home, _forwards):
            forwarder = targets[0].forwarder
            assert forwarder is not None  # as _forwards said
            batch = ForwardBatch(forwarder, targets, key, record)
            batches.update(dict.fromkeys(batch.urls, batch))
        return batches

    def _skew_refused(self, replica: Replica, error: ReplicaSkewRefused) -> None:
        stats = self.stats
        stats.skew_refusals += 1
        now = time.monotonic()
        if now - stats.last_skew_log >= _SKEW_LOG_EVERY_S:
            stats.last_skew_log = now
            # Blame a clock only on the fence's evidence: the offsets measured to every member.
            log.error(
                "%s refused a write for clock skew (%d refusals so far): %s. %s",
                replica.url, stats.skew_refusals, self._fence.refresh().describe(), error,
            )  # fmt: skip

    def _count_repair(self) -> None:
        self.stats.read_repairs += 1

    def _replicas_for(self, key: bytes, quorum: Quorum) -> list[Replica]:
        """A read's replicas: the key's owners."""
        placement = self._reads or self.placement
        return list(map(self._replica_of, placement.replicas_for(key, quorum.copies)))

    def _write_targets(self, key: bytes, quorum: Quorum) -> tuple[list[Replica], Quorum]:
        """A write's replicas and quorum: the key's owners, and while a member joins or leaves, the members
        that will own it next too (pending), which must confirm as well (Cassandra's pending ranges: ack +
        pending). A record for every owner (``from`` = N) is one for every next owner."""
        reads = self._reads
        if reads is None:
            return self._replicas_for(key, quorum), quorum
        owners = reads.replicas_for(key, quorum.copies)
        future = (
            self.placement.replication
            if quorum.copies == reads.replication
            else min(quorum.copies, self.placement.replication)
        )
        pending = [url for url in self.placement.replicas_for(key, future) if url not in owners]
        targets = list(map(self._replica_of, (*owners, *pending)))
        return targets, quorum.with_pending([self.placement.datacenter_of(url) for url in pending])


class _Write:
    """One write's round of the fan-out (kvnode.coordinator.fanout.Round), one object for all its calls:
    each replica's write started, and its outcome heard: a hint for a replica that missed it, a hint kept
    at dispatch removed once the write lands after all, a newer version held observed."""

    __slots__ = ("_coordinator", "_encoded", "_hinted", "_key", "_record")

    def __init__(self, coordinator: Coordinator, key: bytes, record: Record) -> None:
        self._coordinator = coordinator
        self._key = key
        self._record = record
        self._encoded = encode(record)  # once for every replica, not once by each
        # The replicas not connected when the write was sent; None until one is (nearly every write).
        self._hinted: dict[str, _DispatchHint] | None = None

    def start(self, replica: Replica, answered: Answered[int | None]) -> None:
        """Start one replica's write. A replica not connected now gets its hint before the client is
        answered (so it survives a crash of this node); one that fails later is hinted then."""
        if not replica.connected:
            self._hint_at_dispatch(replica)
        replica.write_then(self._key, self._record, answered, self._encoded)

    def ended(self, replica: Replica, error: ReplicaError | None, held: int | None) -> None:
        """One replica's write has ended (the fan-out tells this its outcome)."""
        hinted, coordinator = self._hinted, self._coordinator
        hint = _NOT_HINTED if hinted is None else hinted.get(replica.url, _NOT_HINTED)
        if error is None:
            if hint.kept_seq is not None:  # delivered after all
                coordinator._hints.remove(replica.url, (hint.kept_seq,))
            if held is not None:
                coordinator._clock.observe(held)
        elif isinstance(error, ReplicaSkewRefused):
            coordinator._skew_refused(replica, error)
        elif not hint.asked and keeps_hint(error) and replica is not coordinator._local:
            # This node's own refusal (its disk full) is no hint: nothing would deliver it to itself, and
            # the hints are on that disk: storage marks it, a repair makes it good (healing.missed_writes).
            coordinator._hints.add(replica.url, self._key, self._record, down_for=replica.down_for())

    def _hint_at_dispatch(self, replica: Replica) -> None:
        seq = self._coordinator._hints.add(replica.url, self._key, self._record, down_for=replica.down_for())
        if self._hinted is None:
            self._hinted = {}
        # HintStore.add answers 0 for a hint it did not keep.
        self._hinted[replica.url] = _DispatchHint(asked=True, kept_seq=seq or None)


class _ForwardedWrite(_Write):
    """A write whose owners span datacenters: each replica's write started through its datacenter's
    forwarder where it has one (``batches``, by URL), else directly."""

    __slots__ = ("_batches",)

    def __init__(
        self, coordinator: Coordinator, key: bytes, record: Record, batches: dict[str, ForwardBatch]
    ) -> None:
        super().__init__(coordinator, key, record)
        self._batches = batches

    def start(self, replica: Replica, answered: Answered[int | None]) -> None:
        """A replica not connected from here is hinted at dispatch either way (the forwarder may reach it:
        its hint is then removed, as when a write sent directly succeeds after all)."""
        batch = self._batches.get(replica.url)
        if batch is None:
            super().start(replica, answered)
            return
        if not replica.connected:
            self._hint_at_dispatch(replica)
        batch.join(replica, answered)


def _forwards(replica: Replica) -> bool:
    """Whether ``replica`` can forward a write to its datacenter's other owners now (Replica.forwarder)."""
    return replica.forwarder is not None


class Ranked(Patient, Protocol):
    """A replica as ``nearest_first`` sees it: its patience, whether its channel is open, and whether it
    is lagging (connected, but quieter than its pace explains: kvnode.replica.failure_detector)."""

    @property
    def connected(self) -> bool: ...

    @property
    def lagging(self) -> bool: ...


R = TypeVar("R", bound=Ranked)


def nearest_first(replicas: list[R], local: R) -> list[R]:
    """The order a speculative read asks a key's replicas in: this node's own first, then the remote ones
    in placement order, except that a clearly slow one (recent p99, see ``_SLOW_FACTOR``) goes last, one
    lagging after it, and one not connected after that: a peer that died or stalled keeps its last
    p99, which would keep it first. A lagging peer is still connected: asked last, it is asked at all
    only when a healthier one fails or is late.

    A slow replica asked last still sees writes and speculative retries, which keep its p99 current, so
    it moves forward again once it is fast again."""
    remote = [(replica.speculative_delay(), replica) for replica in replicas if replica is not local]
    if not remote:
        return replicas
    up = [(delay, replica) for delay, replica in remote if replica.connected and not replica.lagging]
    ordered = [local] if local in replicas else []
    if up:
        slow_above = min(delay for delay, _ in up) * _SLOW_FACTOR + _SLOW_MARGIN_S
        ordered += [replica for delay, replica in up if delay <= slow_above]
        ordered += [replica for delay, replica in up if delay > slow_above]
    ordered += [replica for _, replica in remote if replica.connected and replica.lagging]
    ordered += [replica for _, replica in remote if not replica.connected]
    return ordered
