"""A node's parts in one place: :class:`NodeParts`, the one AppKey the handlers read it by, and
:func:`open_parts`, which opens them (storage, the system database, the peers' channels, the background
tasks) and closes them in the reverse order.

    >>> async with open_parts(config) as parts:                     # doctest: +SKIP
    ...     app = kvnode.node.app.create_app(parts)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from kvnode.access.admission import Admission, default_max_inflight_bytes
from kvnode.access.client_auth import ClientTokens
from kvnode.access.connections import ConnectionGuard, capacity
from kvnode.access.tls import client_context
from kvnode.access.uploads import Uploads
from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock, wall_clock_us
from kvnode.clocks.offsets import ClockOffsets
from kvnode.cluster.changes import OwnPart, take_place
from kvnode.cluster.members import Members
from kvnode.config import NodeConfig
from kvnode.coordinator.coordinator import Coordinator
from kvnode.coordinator.fanout import FANOUTS
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.healing.gc_rule import GcRule
from kvnode.healing.rebuild import Rebuild
from kvnode.healing.tombstone_gc import TombstoneGc, pass_interval_s
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.memory import Settler
from kvnode.metrics import LoopLagMonitor
from kvnode.node.exporter import NodeMetrics
from kvnode.node.peer_api import PeerGate, ReplicaServer
from kvnode.node.snapshot import (
    ClockFigures,
    GcFigures,
    HintFigures,
    NodeSnapshot,
    PeerFigures,
    RebuildFigures,
    RepairFigures,
)
from kvnode.replica import Replica, wire
from kvnode.replica.auth import ClusterAuth, Introduction
from kvnode.replica.hints import HintDelivery, HintStore
from kvnode.replica.identities import Identities
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.replica.readiness import NodeState
from kvnode.storage.keyspace import Storage, StorageUnavailable
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership, at_start

__all__ = ["PARTS", "NodeParts", "open_parts"]

log = logging.getLogger(__name__)

# A peer's clock measurements count this long: a few seconds of beats, so that a clock that was fixed
# (or a peer that went away) stops deciding the fence soon.
_OFFSET_MAX_AGE_S = 10.0


@dataclass(frozen=True, slots=True)
class NodeParts:
    """Everything a node runs on, open; a handler reaches it by ``request.app[PARTS]``."""

    config: NodeConfig
    members: Members  # the membership this node runs with (as stored, not --cluster's), and its peers
    storage: Storage  # the client keyspace
    system: SystemDb  # the node's own state
    clock: HybridClock
    fence: ClockFence  # whether this node's clock is the one that is off
    hints: HintStore
    coordinator: Coordinator
    local: LocalReplica  # this node's storage as one of a key's replicas
    admission: Admission
    connections: ConnectionGuard
    metrics: NodeMetrics
    loop_lag: LoopLagMonitor
    uploads: Uploads
    replica_server: ReplicaServer
    summaries: SummaryUpkeep  # anti-entropy's view of what this node holds
    gc: TombstoneGc  # drops tombstones and expired versions once no replica needs them
    anti_entropy: AntiEntropy  # comparing it with the peers'
    tokens: ClientTokens | None  # the clients' tokens, with --auth-tokens-file
    rebuild: Rebuild  # whether this node's data is whole, and its rebuild if it is not
    identities: Identities  # who this node and its peers are, as handshakes tell it

    @property
    def membership(self) -> Membership:
        return self.members.membership

    @property
    def peers(self) -> list[PeerReplica]:
        """Every other member, in the cluster's order."""
        return self.members.peers

    def use_members(self, members: Members) -> None:
        """Every part that depends on the membership, moved to the one ``members`` runs with now: the one
        place a membership change takes effect (kvnode.cluster.members.Members.adopt calls it)."""
        config, peers, placement = self.config, members.peers, members.placement
        reads = members.membership.read_placement()
        self.coordinator.use(placement, _replicas(self.local, members), reads)
        self.summaries.use(placement)
        self.gc.use(_gc_rule(config, members), {peer.url: peer for peer in peers})
        self.anti_entropy.use(peers)
        self.fence.use(len(peers))
        self.identities.use(members.membership)
        self.metrics.watch(self.snapshot, [self.local, *peers])

    def _receiving(self) -> int:
        """Records received so far by the exchange under way, while this node rebuilds (a rebuild counts
        an exchange's records when it ends; progress should move before)."""
        current = self.anti_entropy.current
        rebuilding = self.rebuild.node_state() is NodeState.REBUILDING
        return current.received if rebuilding and current is not None else 0

    def snapshot(self) -> NodeSnapshot:
        """What the node's counters say now: the one source of /v0/stats, /v0/cluster and /metrics."""
        hints, stats, clock, lag = self.hints, self.coordinator.stats, self.clock, self.loop_lag
        gc = self.gc.counts
        repair = self.anti_entropy.totals
        verdict = self.fence.refresh()
        known, progress = self.system.peer_identities, self.rebuild.progress
        return NodeSnapshot(
            membership_version=self.membership.version,
            membership_streamed=self.members.streamed,
            peers=tuple(
                PeerFigures(
                    peer.url,
                    peer.state,
                    peer.down_for(),
                    peer.refusal,
                    peer.node_state,
                    known.get(peer.url)[0],
                )
                for peer in self.peers
            ),
            hints=HintFigures(
                pending=hints.pending_by_target(),
                kept=dict(hints.kept),
                delivered=dict(hints.delivered),
                dropped=dict(hints.dropped),
            ),
            gc=GcFigures(
                passes=gc.passes,
                tombstones_dropped=gc.tombstones_dropped,
                expired_dropped=gc.expired_dropped,
                unowned_dropped=gc.unowned_dropped,
                waiting=gc.waiting,
                waiting_for=dict(gc.waiting_for),
                unconfirmed=gc.unconfirmed,
            ),
            rewrites=stats.rewrites,
            read_repairs=stats.read_repairs,
            skew_refusals=stats.skew_refusals,
            clock_lead_us=clock.lead_us,
            clock_ignored=clock.ignored,
            clock_fence=ClockFigures(
                fenced=verdict.fenced,
                offset_us=verdict.offset_us,
                measured=verdict.measured,
                far=verdict.far,
                peer_offsets_us={peer: o.offset_us for peer, o in verdict.peers.items()},
                summary=verdict.describe(),
            ),
            rebuild=RebuildFigures(
                identity=self.system.identity.value,
                state=self.rebuild.node_state().value,
                peers=progress.peers,
                peers_done=len(progress.done),
                records_received=progress.records_received + self._receiving(),
                seconds=round(progress.seconds(), 3),
                attempts=progress.attempts,
                waiting_for=dict(progress.waiting_for),
            ),
            repair=RepairFigures(
                summaries_ready=self.summaries.ready.is_set(),
                summaries_rebuilt=self.summaries.rebuilt,
                exchanges=dict(repair.exchanges),
                segments_compared=repair.segments_compared,
                segments_differing=repair.segments_differing,
                records={"sent": repair.sent, "received": repair.received, "refused": repair.refused},
            ),
            inflight=self.admission.inflight,
            inflight_bytes=self.admission.inflight_bytes,
            shed=self.admission.shed,
            client_connections=self.connections.clients,
            connections_refused=self.connections.refused,
            header_timeouts=self.connections.header_timeouts,
            loop_lag_samples=lag.histogram.count,
            loop_lag_ms=lag.histogram.summary_ms(),
            loop_lag_since_start=lag.since_start.copy(),
        )


PARTS = web.AppKey("parts", NodeParts)


@contextlib.asynccontextmanager
async def open_parts(config: NodeConfig) -> AsyncIterator[NodeParts]:
    """The node's parts, open and running (hint delivery, the loop-lag monitor) until the block ends.

    Raises kvnode.storage.keyspace.StorageUnavailable when the data dir cannot be had,
    kvnode.access.tls.TlsUnusable and kvnode.access.client_auth.BadTokensFile when the TLS or token files
    cannot be used. Call it inside the running event loop (the replicas keep a reference to it).
    """
    peer_ssl = client_context(config)
    tokens = None if config.auth_tokens_file is None else ClientTokens(config.auth_tokens_file)
    async with contextlib.AsyncExitStack() as opened:
        storage = Storage.open(config.data_dir, fsync=config.fsync)
        opened.callback(storage.close)
        system = SystemDb.open(config.data_dir)
        opened.callback(system.close)
        limits = wire.Limits.for_body(config.max_body_bytes)
        membership = await _membership_at_start(system, config, peer_ssl, limits)
        size = len(membership.urls)
        summaries = SummaryUpkeep(storage, system.summaries, config.url, membership.placement())
        summaries.start()
        opened.push_async_callback(summaries.stop)  # after every writer stopped: saves the trees
        floor = system.clock_floor
        wall = wall_clock_us(config.clock_offset_ms)
        max_skew_us = config.max_clock_skew_ms * 1000
        clock = HybridClock(wall, max_skew_us, floor.load(), floor.persist)
        if clock.dropped_floor:
            log.warning(
                "dropped the clock floor %d persisted %.0f ms ahead of the wall clock (the clock was wrong "
                "then, or is now)", clock.dropped_floor, (clock.dropped_floor - wall()) / 1000,
            )  # fmt: skip
        fence = ClockFence(wall, max_skew_us, ClockOffsets(_OFFSET_MAX_AGE_S), peers=size - 1)
        hints = HintStore(
            system.hints,
            fsync=config.fsync,
            max_per_peer=config.max_hints_per_peer,
            window_s=config.hint_window_s,
            grace_s=config.gc_grace_s,
        )
        rebuild = Rebuild(system.identity, size)

        def peer_met(peer_url: str, theirs: Introduction) -> None:
            rebuild.peer_met(peer_url, theirs)
            members.heard_version(peer_url, theirs.membership)

        identities = Identities(config.url, membership, system.identity, system.peer_identities, peer_met)
        gate = PeerGate(
            _cluster_auth(config, membership),
            limits,
            identities=identities,
            tls=config.tls,
        )

        def make_peer(url: str) -> PeerReplica:
            return PeerReplica(
                url,
                config.timeout,
                speculative_ceiling=config.speculative_ceiling_ms / 1000,
                auth=gate.auth,
                limits=gate.limits,
                clock_sampler=(fence.measured, wall),
                ssl_context=peer_ssl,
                identities=identities,
            )

        members = Members(
            config.url, membership, system.membership, hints, make_peer, clock.current, config.crash_at
        )
        fence.measure_peers = lambda: _measure_clocks(members.peers)
        local = LocalReplica(config.url, storage, fence, rebuild.node_state)
        coordinator = Coordinator(
            members.placement, _replicas(local, members), FANOUTS[config.fanout], clock, hints, local, fence
        )
        coordinator.use(members.placement, _replicas(local, members), membership.read_placement())
        settler = Settler()
        parts = NodeParts(
            config=config,
            members=members,
            storage=storage,
            system=system,
            clock=clock,
            fence=fence,
            hints=hints,
            coordinator=coordinator,
            local=local,
            admission=Admission(
                config.max_inflight,
                config.max_inflight_bytes or default_max_inflight_bytes(),
                config.max_body_bytes,
                settler,
            ),
            connections=capacity(size, config.max_connections, config.header_timeout_s),
            metrics=NodeMetrics(),
            loop_lag=LoopLagMonitor(),
            uploads=Uploads(config.body_timeout_s),
            replica_server=ReplicaServer(gate, storage, clock, fence, summaries, rebuild.node_state, members),
            summaries=summaries,
            gc=TombstoneGc(
                storage,
                _gc_rule(config, members),
                system.repair_marks,
                clock.current,
                pass_interval_s(config.gc_grace_s),
                {peer.url: peer for peer in members.peers},
            ),
            anti_entropy=AntiEntropy(
                config.url,
                summaries,
                storage,
                local,
                members.peers,
                clock,
                system.repair_marks,
                interval_s=config.repair_interval_s,
                rate=config.repair_rate,
            ),
            tokens=tokens,
            rebuild=rebuild,
            identities=identities,
        )
        parts.metrics.watch(parts.snapshot, [local, *members.peers])
        members.listeners.append(parts.use_members)
        settler.start()
        opened.push_async_callback(settler.stop)

        def follow(peer: PeerReplica) -> Callable[[], Awaitable[None]]:
            delivery = HintDelivery(hints, peer, config.hint_rate, settler)
            delivery.start()
            return delivery.stop

        members.follow = follow
        members.start()
        opened.push_async_callback(members.close)
        parts.gc.start()
        opened.push_async_callback(parts.gc.stop)
        parts.loop_lag.start()
        opened.push_async_callback(parts.loop_lag.stop)
        parts.anti_entropy.start()
        opened.push_async_callback(parts.anti_entropy.stop)
        rebuild.start(parts.anti_entropy)
        opened.push_async_callback(rebuild.stop)
        own_part = OwnPart(members, parts.anti_entropy, storage, 2 * config.timeout, config.crash_at)
        members.listeners.append(own_part.check)
        own_part.check(members)  # a join or a leave under way at start: this node goes on with its part
        opened.push_async_callback(own_part.stop)
        yield parts


def _replicas(local: LocalReplica, members: Members) -> dict[str, Replica]:
    """Every member as a replica, by URL: this node's storage and its peers."""
    replicas: dict[str, Replica] = {local.url: local}
    replicas.update({peer.url: peer for peer in members.peers})
    return replicas


async def _measure_clocks(peers: list[PeerReplica]) -> None:
    await asyncio.gather(*(peer.measure_clock() for peer in peers))


def _gc_rule(config: NodeConfig, members: Members) -> GcRule:
    # A version reaches a replica within the replica timeout (a write) or the hint window (a hint),
    # stamped by a clock up to the maximum skew off this one's (kvnode.healing.gc_rule).
    arrival_us = (config.timeout_ms + config.max_clock_skew_ms) * 1000 + config.hint_window_s * 1_000_000
    membership = members.membership
    settled = None if membership.joining or membership.leaving else members.since
    return GcRule(
        config.url,
        members.placement,
        grace_us=config.gc_grace_s * 1_000_000,
        arrival_us=arrival_us,
        settled_since=settled,
    )


def _cluster_auth(config: NodeConfig, membership: Membership) -> ClusterAuth | None:
    if not config.cluster_secret:
        return None  # kvnode.node.serving says so, once listening
    return ClusterAuth(config.cluster_secret, membership.cluster, config.url)


async def _membership_at_start(
    system: SystemDb, config: NodeConfig, peer_ssl: ssl.SSLContext | None, limits: wire.Limits
) -> Membership:
    """The stored membership; at the first start, the one --cluster seeds, stored before it is used, or
    with --replace the one this node takes a member's place in (raises ChangeRefused)."""
    try:
        stored = system.membership.load()
    except ValueError as error:
        unreadable = f"the stored membership in {config.data_dir} is unreadable: {error}"
        raise StorageUnavailable(unreadable) from None
    if config.join:
        if stored is None:
            return await take_place(config, system, peer_ssl, limits)
        log.info("a member already (membership version %d): --join and --replace are ignored", stored.version)
        membership, warnings = stored, list[str]()
    else:
        membership, warnings = at_start(stored, config.members, config.replication_factor)
    if stored is None:
        system.membership.save(membership)
    for warning in warnings:
        log.warning("%s", warning)
    if config.url not in membership.urls:
        raise StorageUnavailable(
            f"{config.url} is not a member of the cluster stored in {config.data_dir} "
            f"({','.join(membership.urls)}): start it with its member URL, or with another data dir"
        )
    return membership
