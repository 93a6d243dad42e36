"""One snapshot of a node's state: the figures that ``/v0/stats``, ``/v0/cluster`` and ``/metrics`` show,
read at once into plain data (by kvnode.node.parts.NodeParts.snapshot), so the three cannot disagree on what a
figure means."""

from __future__ import annotations

from dataclasses import dataclass

from kvnode.metrics import FixedBuckets

__all__ = [
    "ClockFigures",
    "GcFigures",
    "HintFigures",
    "NodeSnapshot",
    "PeerFigures",
    "RebuildFigures",
    "RepairFigures",
]


@dataclass(frozen=True, slots=True)
class PeerFigures:
    url: str
    state: str  # its replica channel's (kvnode.replica.peer_state.PeerState's values)
    down_for_s: float  # since it last failed with no answer since; 0 while it answers
    refusal: str  # while refused: what the handshake was refused for ("secret", ...); else ""
    node_state: str  # the state of its data as it last said (kvnode.healing.rebuild_state); "" before
    identity: str  # the identity it had when this node last met it; "" before
    phi: float  # while connected, its failure detector's suspicion (kvnode.replica.failure_detector); else 0
    protocol: int  # the replica protocol version its channel speaks (kvnode.replica.protocol); 0: none open


@dataclass(frozen=True, slots=True)
class HintFigures:
    pending: dict[str, int]  # waiting for delivery, by target (only targets that have some)
    kept: dict[str, int]  # by target, since start
    delivered: dict[str, int]  # by target, since start
    dropped: dict[str, int]  # not kept or dropped undelivered, by reason, since start


@dataclass(frozen=True, slots=True)
class GcFigures:
    """Tombstone GC's counts (kvnode.healing.tombstone_gc)."""

    passes: int  # complete passes since start
    tombstones_dropped: int  # since start
    expired_dropped: int  # versions whose TTL ran out, since start
    unowned_dropped: int  # versions no longer this node's, handed over to their owners, since start
    waiting: int  # past the grace period but kept for a repair, as the last pass found
    waiting_for: dict[str, int]  # of those, how many wait for a repair with each peer
    unconfirmed: int  # allowed by the rule but kept: a replica did not answer or held an older version


@dataclass(frozen=True, slots=True)
class ClockFigures:
    """The clock fence's verdict (kvnode.clocks.fence)."""

    fenced: bool  # this node refuses to coordinate writes: its clock is off
    offset_us: int  # this node's wall clock minus the measured members' median
    measured: int  # peers with a current offset estimate
    far: tuple[str, ...]  # peers beyond the maximum skew from this node
    peer_offsets_us: dict[str, int]  # each measured peer's clock minus this node's
    summary: str  # one line: which clock is off, and what to check


@dataclass(frozen=True, slots=True)
class RebuildFigures:
    """This node's identity, the state of its data, and its rebuild's progress (kvnode.healing.rebuild)."""

    identity: str
    state: str  # of its data: unknown, rebuilding, serving
    peers: int  # to complete a repair with while rebuilding
    peers_done: int
    records_received: int
    seconds: float  # the rebuild's, so far or in all (0 when this node did not rebuild since start)
    attempts: int  # rounds of repairs with the peers not done yet
    waiting_for: dict[str, str]  # peer -> why its last repair failed


@dataclass(frozen=True, slots=True)
class RepairFigures:
    """Anti-entropy's (kvnode.healing), since start."""

    summaries_ready: bool  # false while the summaries are rebuilt after a crash
    summaries_rebuilt: int  # records scanned by that rebuild
    exchanges: dict[str, int]  # by outcome: completed, failed
    segments_compared: int
    segments_differing: int
    records: dict[str, int]  # moved by direction (sent, received), and refused for clock skew


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    membership_version: int  # of the membership this node runs with
    membership_streamed: int  # records got by joining, or sent by leaving (kvnode.cluster.changes)
    peers: tuple[PeerFigures, ...]  # in the cluster's order, this node left out
    protocols: str  # the replica protocol versions this node speaks, "1-2" (kvnode.replica.protocol)
    hints: HintFigures
    gc: GcFigures
    rewrites: int  # writes stamped again because a replica held a newer version
    read_repairs: int  # repair writes sent to stale replicas
    skew_refusals: int  # replica writes refused because this node's clock runs ahead
    clock_lead_us: int  # how far the hybrid clock runs ahead of the wall clock
    clock_ignored: int  # timestamps seen beyond the maximum skew
    clock_fence: ClockFigures
    rebuild: RebuildFigures
    repair: RepairFigures
    inflight: int  # client entity requests between arrival and answer
    inflight_bytes: int  # their bodies' sizes (kvnode.access.admission)
    shed: int  # client entity requests answered 503 since start
    shed_by: dict[str, int]  # the same by why: requests or bytes in progress, or a starved loop
    client_connections: int  # open, not known to be a peer's (kvnode.access.connections)
    connections_refused: int  # answered 503 for the connection cap since start
    header_timeouts: int  # closed since start because their request headers came too slowly
    loop_lag_samples: int  # in the loop-lag window (since start or the last ``/v0/stats?reset=1``)
    loop_lag_ms: dict[str, float]  # that window's percentiles ({"p50": ms, ..., "max": ms})
    loop_lag_since_start: FixedBuckets  # every sample since start, in Prometheus's buckets
    loop_lag_worst_s: float  # the worst lag since start
    loop_lag_ran_s: float  # of the window's lags, the longest spent running on the loop's thread (a step)
    starved: bool  # whether the loop is starved now: new client entity requests are shed
