"""A node's parts in one value: :class:`NodeParts`, the one AppKey the handlers read it by, and the one
snapshot of the node's figures. kvnode.node.wiring builds them, in dependency order, and closes them; a
membership change reaches them through kvnode.cluster.members, as a new epoch."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from kvnode.access.admission import REQUEST_FIGURES, Admission
from kvnode.access.client_auth import ClientTokens
from kvnode.access.connections import CONNECTION_FIGURES, ConnectionGuard
from kvnode.access.uploads import Uploads
from kvnode.clocks.fence import FENCE_FIGURES, ClockFence
from kvnode.clocks.hybrid import CLOCK_FIGURES, HybridClock
from kvnode.cluster.members import MEMBERSHIP_FIGURES, Members
from kvnode.cluster.own_part import CHANGE_FIGURES, OwnPart
from kvnode.config import NodeConfig
from kvnode.coordinator.coordinator import COORDINATOR_FIGURES, Coordinator
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.healing.gc import GC_FIGURES, GarbageCollector
from kvnode.healing.outcomes import REPAIR_FIGURES
from kvnode.healing.rebuild import REBUILD_FIGURES, Rebuild
from kvnode.healing.upkeep import SUMMARY_FIGURES, SummaryUpkeep
from kvnode.loop_lag import LoopLagMonitor
from kvnode.memory import Settler
from kvnode.node.exporter import NodeMetrics
from kvnode.node.snapshot import NodeSnapshot
from kvnode.paxos.acceptor_calls import AcceptorCalls
from kvnode.paxos.rounds import PAXOS_FIGURES, PaxosRounds
from kvnode.replica.channel.answerers import ANSWERED_FIGURES
from kvnode.replica.channel.identities import IDENTITY_FIGURES, Identities
from kvnode.replica.channel.protocol import spoken
from kvnode.replica.channel.server import ReplicaServer
from kvnode.replica.hints import HINT_FIGURES, HintStore
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.replica.peer_figures import PEER_FIGURES
from kvnode.storage.keyspace import Storage
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership

__all__ = ["PARTS", "NodeParts"]


@dataclass(frozen=True, slots=True)
class NodeParts:
    """Everything a node runs on, open; a handler reaches it by ``request.app[PARTS]``."""

    config: NodeConfig
    members: Members  # the membership this node runs with (as stored, not --cluster's), and its peers
    own_part: OwnPart  # this node's part in a membership change it walks, and its progress
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
    gc: GarbageCollector  # drops tombstones, expired versions and surplus copies once no replica needs them
    anti_entropy: AntiEntropy  # comparing it with the peers'
    tokens: ClientTokens | None  # the clients' tokens, with --auth-tokens-file
    rebuild: Rebuild  # whether this node's data is whole, and its rebuild if it is not
    identities: Identities  # who this node and its peers are, as handshakes tell it
    paxos: PaxosRounds  # conditional writes and serial reads
    acceptor: AcceptorCalls  # this node's part in every key's Paxos rounds
    settler: Settler  # gives memory back after large values and floods of TLS connections

    @property
    def membership(self) -> Membership:
        return self.members.membership

    @property
    def peers(self) -> list[PeerReplica]:
        """Every other member, in the cluster's order."""
        return self.members.peers

    def snapshot(self) -> NodeSnapshot:
        """What the node's counters say now: the one source of /v0/stats, /v0/cluster and /metrics. A
        part's figures are read by its table (kvnode.figures), in the order /v0/stats shows them."""
        lag = self.loop_lag
        return NodeSnapshot(
            readings=(
                REBUILD_FIGURES.read(self.rebuild),
                CLOCK_FIGURES.read(self.clock),
                FENCE_FIGURES.read(self.fence.refresh()),
                HINT_FIGURES.read(self.hints),
                GC_FIGURES.read(self.gc.counts),
                SUMMARY_FIGURES.read(self.summaries),
                REPAIR_FIGURES.read(self.anti_entropy.totals),
                REQUEST_FIGURES.read(self.admission),
                COORDINATOR_FIGURES.read(self.coordinator.stats),
                PAXOS_FIGURES.read(self.paxos.stats),
                CONNECTION_FIGURES.read(self.connections),
                MEMBERSHIP_FIGURES.read(self.members),
                CHANGE_FIGURES.read(self.own_part),
                IDENTITY_FIGURES.read(self.identities),
                ANSWERED_FIGURES.read(self.replica_server.answerers),
            ),
            peers=tuple((peer.url, PEER_FIGURES.read(peer)) for peer in self.peers),
            protocols=str(spoken(self.config.max_protocol)),
            loop_lag_samples=lag.histogram.count,
            loop_lag_ms=lag.histogram.summary_ms(),
            loop_lag_since_start=lag.since_start.copy(),
            loop_lag_worst_s=lag.worst_s,
            loop_lag_ran_s=lag.window_ran_s,
        )


PARTS = web.AppKey("parts", NodeParts)
