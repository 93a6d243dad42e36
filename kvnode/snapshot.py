"""One snapshot of a node's state: the figures that ``/v0/stats``, ``/v0/cluster`` and ``/metrics`` show,
read at once into plain data (by kvnode.parts.NodeParts.snapshot), so the three cannot disagree on what a
figure means."""

from __future__ import annotations

from dataclasses import dataclass

from kvnode.metrics import FixedBuckets

__all__ = ["ClockFigures", "HintFigures", "NodeSnapshot", "PeerFigures"]


@dataclass(frozen=True, slots=True)
class PeerFigures:
    url: str
    state: str  # its replica channel's (kvnode.replica.peer_state.PeerState's values)
    down_for_s: float  # since it last failed with no answer since; 0 while it answers
    refusal: str  # while refused: what the handshake was refused for ("secret", ...); else ""


@dataclass(frozen=True, slots=True)
class HintFigures:
    pending: dict[str, int]  # waiting for delivery, by target (only targets that have some)
    kept: dict[str, int]  # by target, since start
    delivered: dict[str, int]  # by target, since start
    dropped: dict[str, int]  # not kept or dropped undelivered, by reason, since start


@dataclass(frozen=True, slots=True)
class ClockFigures:
    """The clock fence's verdict (kvnode.clock_fence)."""

    fenced: bool  # this node refuses to coordinate writes: its clock is off
    offset_us: int  # this node's wall clock minus the measured members' median
    measured: int  # peers with a current offset estimate
    far: tuple[str, ...]  # peers beyond the maximum skew from this node
    peer_offsets_us: dict[str, int]  # each measured peer's clock minus this node's
    summary: str  # one line: which clock is off, and what to check


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    peers: tuple[PeerFigures, ...]  # in the cluster's order, this node left out
    hints: HintFigures
    rewrites: int  # writes stamped again because a replica held a newer version
    read_repairs: int  # repair writes sent to stale replicas
    skew_refusals: int  # replica writes refused because this node's clock runs ahead
    clock_lead_us: int  # how far the hybrid clock runs ahead of the wall clock
    clock_ignored: int  # timestamps seen beyond the maximum skew
    clock_fence: ClockFigures
    inflight: int  # client entity requests between arrival and answer
    inflight_bytes: int  # their bodies' sizes (kvnode.admission)
    shed: int  # client entity requests answered 503 since start
    client_connections: int  # open, not known to be a peer's (kvnode.connections)
    connections_refused: int  # answered 503 for the connection cap since start
    header_timeouts: int  # closed since start because their request headers came too slowly
    loop_lag_samples: int  # in the loop-lag window (since start or the last ``/v0/stats?reset=1``)
    loop_lag_ms: dict[str, float]  # that window's percentiles ({"p50": ms, ..., "max": ms})
    loop_lag_since_start: FixedBuckets  # every sample since start, in Prometheus's buckets
