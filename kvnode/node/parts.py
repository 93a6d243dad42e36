"""A node's parts in one value: :class:`NodeParts`, the one AppKey the handlers read it by, and the one
snapshot of the node's figures. kvnode.node.wiring builds them, in dependency order, and closes them; a
membership change reaches them through kvnode.cluster.members, as a new epoch."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from kvnode.access.admission import Admission
from kvnode.access.client_auth import ClientTokens
from kvnode.access.connections import ConnectionGuard
from kvnode.access.uploads import Uploads
from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock
from kvnode.cluster.members import Members
from kvnode.config import NodeConfig
from kvnode.coordinator.coordinator import Coordinator
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.healing.rebuild import Rebuild
from kvnode.healing.tombstone_gc import TombstoneGc
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.metrics import LoopLagMonitor
from kvnode.node.exporter import NodeMetrics
from kvnode.node.peer_api import ReplicaServer
from kvnode.node.snapshot import (
    ClockFigures,
    GcFigures,
    HintFigures,
    NodeSnapshot,
    PeerFigures,
    RebuildFigures,
    RepairFigures,
)
from kvnode.replica.hints import HintStore
from kvnode.replica.identities import Identities
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.replica.protocol import spoken
from kvnode.replica.readiness import NodeState
from kvnode.storage.keyspace import Storage
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership

__all__ = ["PARTS", "NodeParts"]


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
                    peer.phi,
                    peer.protocol,
                )
                for peer in self.peers
            ),
            protocols=str(spoken(self.config.max_protocol)),
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
            shed_by=dict(self.admission.shed_by),
            client_connections=self.connections.clients,
            connections_refused=self.connections.refused,
            header_timeouts=self.connections.header_timeouts,
            loop_lag_samples=lag.histogram.count,
            loop_lag_ms=lag.histogram.summary_ms(),
            loop_lag_since_start=lag.since_start.copy(),
            loop_lag_worst_s=lag.worst_s,
            loop_lag_ran_s=lag.window_ran_s,
            starved=lag.starvation.shedding,
        )


PARTS = web.AppKey("parts", NodeParts)
