"""The node's Prometheus metrics: one registry per process (never the global one) and the collector of
every ``kvnode_*`` metric in it, rendered for ``GET /metrics``.

The hot path only adds to plain counters: each client request to one :class:`~kvnode.metrics.FixedBuckets`
per (operation, status), where kvnode.node.client_api answers it, each replica call to its replica's
:class:`~kvnode.metrics.CallMeter`, where the replica settles the call (no callback of its own: asyncio
would schedule one per call). prometheus_client's own Counter and Histogram children lock on every
observation, which costs more per request than the request's own bookkeeping. Everything else the node
counts is read when Prometheus scrapes, from one :class:`~kvnode.node.snapshot.NodeSnapshot`.
docs/node-internals.md has the costs and how to measure them.

Every (operation, status) a handler is known to answer has its series from the start, at 0, so a dashboard
or an alert sees a zero rather than nothing (Prometheus's guidance for known label sets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kvnode.metrics import LATENCY_BUCKETS_S, CallMeter, FixedBuckets
from kvnode.node.snapshot import NodeSnapshot, RepairFigures
from kvnode.replica.peer_state import PeerState
from kvnode.replica.readiness import NodeState
from kvnode.topology.epoch import Epoch

__all__ = ["PEER_STATES", "MeteredReplica", "NodeMetrics"]

PEER_STATES = tuple(state.value for state in PeerState)
_BOUNDS = [repr(bound) for bound in LATENCY_BUCKETS_S] + ["+Inf"]  # the le label values


class MeteredReplica(Protocol):
    """A replica whose calls are counted (kvnode.replica.local and .peer)."""

    url: str
    meter: CallMeter


class NodeMetrics(Collector):
    """The node's Prometheus registry and the collector of every ``kvnode_*`` metric in it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests: dict[str, dict[int, FixedBuckets]] = {}  # by operation, then status
        self._snapshot: Callable[[], NodeSnapshot] | None = None
        self._replicas: Sequence[MeteredReplica] = ()
        self._local: tuple[MeteredReplica, ...] = ()
        self.registry.register(self)
        ProcessCollector(registry=self.registry)  # CPU seconds, memory, open fds: process_*

    def requests(self, op: str, statuses: Iterable[int]) -> dict[int, FixedBuckets]:
        """The buckets of ``op``'s requests by status, which its handler observes each answer in (adding a
        status it did not know); ``statuses`` are those it is known to answer, exported at 0 until they
        happen."""
        by_status = self._requests.setdefault(op, {})
        for status in statuses:
            by_status.setdefault(status, FixedBuckets())
        return by_status

    def watch(self, snapshot: Callable[[], NodeSnapshot], local: MeteredReplica) -> None:
        """Read the node's state from ``snapshot``, and the replicas' meters (``local``'s and, from
        :meth:`use` on, the peers'), at every scrape."""
        self._snapshot = snapshot
        self._local = self._replicas = (local,)

    def use(self, epoch: Epoch[MeteredReplica]) -> None:
        """Count the calls to another membership's peers from the next scrape on."""
        self._replicas = (*self._local, *epoch.peers.values())

    def collect(self) -> Iterator[Metric]:
        yield from self._request_metrics()
        yield from _replica_metrics(self._replicas)
        if self._snapshot is not None:
            yield from _state_metrics(self._snapshot())

    def _request_metrics(self) -> Iterator[Metric]:
        count = CounterMetricFamily(
            "kvnode_requests",
            "Client entity requests answered, by operation and status",
            labels=["op", "status"],
        )
        duration = HistogramMetricFamily(
            "kvnode_request_duration_seconds",
            "Client entity requests from arrival to answer, by operation and status",
            labels=["op", "status"],
        )
        for op, by_status in sorted(self._requests.items()):
            for status, buckets in sorted(by_status.items()):
                labels = [op, str(status)]
                count.add_metric(labels, buckets.count)
                _add_histogram(duration, labels, buckets)
        yield count
        yield duration


def _replica_metrics(replicas: Sequence[MeteredReplica]) -> Iterator[Metric]:
    calls = CounterMetricFamily(
        "kvnode_replica_calls",
        "Replica calls this node made (its own storage included), by replica, operation (read and write "
        "as coordinator and for read repair; hint: a hinted write delivered) and outcome (ok, timeout, "
        "unavailable, overloaded, rejected, ...)",
        labels=["peer", "op", "outcome"],
    )
    duration = HistogramMetricFamily(
        "kvnode_replica_call_duration_seconds",
        "Replica calls from start to answer or failure, by replica",
        labels=["peer"],
    )
    drops = CounterMetricFamily(
        "kvnode_peer_channel_drops", "Replica channels given up since start, by peer: the peer closed one, "
        "or was taken for dead", labels=["peer"],
    )  # fmt: skip
    for replica in replicas:
        meter = replica.meter
        for (op, outcome), value in sorted(meter.calls.items()):
            calls.add_metric([replica.url, op, outcome], value)
        _add_histogram(duration, [replica.url], meter.latency)
        drops.add_metric([replica.url], meter.drops)
    yield from (calls, duration, drops)


def _state_metrics(snapshot: NodeSnapshot) -> Iterator[Metric]:
    hints = snapshot.hints
    pending = GaugeMetricFamily(
        "kvnode_hints_pending", "Hints waiting for delivery, by target", labels=["peer"]
    )
    kept = CounterMetricFamily("kvnode_hints_kept", "Hints kept since start, by target", labels=["peer"])
    delivered = CounterMetricFamily(
        "kvnode_hints_delivered", "Hints delivered since start, by target", labels=["peer"]
    )
    peer_state = GaugeMetricFamily(
        "kvnode_peer_state", "1 for the state each peer's replica channel is in", labels=["peer", "state"]
    )
    down = GaugeMetricFamily(
        "kvnode_peer_down_seconds", "Seconds since a peer last failed with no answer since (0: it answers)",
        labels=["peer"],
    )  # fmt: skip
    phi = GaugeMetricFamily(
        "kvnode_peer_phi",
        "While connected, how unlikely a peer's silence is for a live peer: -log10 of its probability "
        "(1: asked last by speculative reads; --phi-threshold: taken for dead)",
        labels=["peer"],
    )
    protocol = GaugeMetricFamily(
        "kvnode_peer_protocol_version",
        "The replica protocol version each peer's channel speaks (0: no channel open)",
        labels=["peer"],
    )
    for peer in snapshot.peers:
        url = peer.url
        pending.add_metric([url], hints.pending.get(url, 0))
        kept.add_metric([url], hints.kept.get(url, 0))
        delivered.add_metric([url], hints.delivered.get(url, 0))
        for name in PEER_STATES:
            peer_state.add_metric([url, name], 1 if name == peer.state else 0)
        down.add_metric([url], peer.down_for_s)
        phi.add_metric([url], peer.phi)
        protocol.add_metric([url], peer.protocol)
    yield from (pending, kept, delivered, peer_state, down, phi, protocol)
    yield GaugeMetricFamily(
        "kvnode_membership_version",
        "The version of the membership this node runs with (kvnode.topology.membership)",
        snapshot.membership_version,
    )
    yield CounterMetricFamily(
        "kvnode_membership_streamed_records",
        "Records this node got by joining, or sent to their next owners by leaving",
        snapshot.membership_streamed,
    )
    yield GaugeMetricFamily(
        "kvnode_inflight_requests", "Client entity requests between arrival and answer", snapshot.inflight
    )
    shed = CounterMetricFamily(
        "kvnode_requests_shed", "Client entity requests answered 503 at once, by why: requests or bytes in "
        "progress beyond their limits, or an event loop starved (behind for a while)", labels=["reason"],
    )  # fmt: skip
    for reason in ("requests", "bytes", "starved"):
        shed.add_metric([reason], snapshot.shed_by.get(reason, 0))
    yield shed
    starved = "1 while the event loop is starved: new client entity requests are shed"
    yield GaugeMetricFamily("kvnode_starved", starved, int(snapshot.starved))
    yield GaugeMetricFamily(
        "kvnode_inflight_body_bytes",
        "Bytes of the bodies of client entity requests between arrival and answer",
        snapshot.inflight_bytes,
    )
    yield GaugeMetricFamily(
        "kvnode_client_connections",
        "Open connections not known to be a peer's replica channel",
        snapshot.client_connections,
    )
    yield CounterMetricFamily(
        "kvnode_connections_refused",
        "Connections answered 503 and closed because --max-connections were open",
        snapshot.connections_refused,
    )
    yield CounterMetricFamily(
        "kvnode_header_timeouts",
        "Connections closed because their request headers had not all arrived within --header-timeout-s",
        snapshot.header_timeouts,
    )
    dropped = CounterMetricFamily(
        "kvnode_hints_dropped",
        "Hints not kept or dropped undelivered: window (target down too long), expired (older than the "
        "window), grace (record older than the GC grace period), full, refused (for clock skew), storage, "
        "member (the target is no longer a member)",
        labels=["reason"],
    )
    for reason, value in sorted(hints.dropped.items()):
        dropped.add_metric([reason], value)
    yield dropped
    yield from _gc_metrics(snapshot)
    yield CounterMetricFamily(
        "kvnode_read_repairs", "Repair writes sent to stale replicas", snapshot.read_repairs
    )
    yield CounterMetricFamily(
        "kvnode_rewrites", "Writes stamped again because a replica held a newer version", snapshot.rewrites
    )
    yield CounterMetricFamily(
        "kvnode_skew_refusals",
        "Replica writes refused because this node's clock runs ahead",
        snapshot.skew_refusals,
    )
    yield GaugeMetricFamily(
        "kvnode_clock_offset_seconds",
        "This node's wall clock minus the median of the members it has measured (the clock fence's view)",
        snapshot.clock_fence.offset_us / 1e6,
    )
    yield GaugeMetricFamily(
        "kvnode_clock_fenced",
        "1 while this node's clock is fenced (off the cluster's): it refuses to coordinate writes",
        1 if snapshot.clock_fence.fenced else 0,
    )
    yield GaugeMetricFamily(
        "kvnode_clock_lead_seconds",
        "How far the hybrid clock runs ahead of the wall clock",
        snapshot.clock_lead_us / 1e6,
    )
    yield CounterMetricFamily(
        "kvnode_clock_ignored_timestamps",
        "Timestamps seen beyond the maximum clock skew, ignored by the clock",
        snapshot.clock_ignored,
    )
    yield from _rebuild_metrics(snapshot)
    yield from _repair_metrics(snapshot.repair)
    lag = HistogramMetricFamily(
        "kvnode_event_loop_lag_seconds",
        "How late the event loop runs a timer that is due: behind queued callbacks or one long step",
    )
    _add_histogram(lag, [], snapshot.loop_lag_since_start)
    yield lag
    yield GaugeMetricFamily(
        "kvnode_event_loop_lag_max_seconds", "The worst event-loop lag since start", snapshot.loop_lag_worst_s
    )


def _gc_metrics(snapshot: NodeSnapshot) -> Iterator[Metric]:
    gc = snapshot.gc
    yield CounterMetricFamily("kvnode_gc_passes", "Tombstone GC passes over the store completed", gc.passes)
    dropped = CounterMetricFamily(
        "kvnode_gc_dropped",
        "Versions tombstone GC dropped, by kind: tombstone, expired (a TTL that ran out), or unowned (a "
        "version this node no longer owned, once its owners held it)",
        labels=["kind"],
    )
    dropped.add_metric(["tombstone"], gc.tombstones_dropped)
    dropped.add_metric(["expired"], gc.expired_dropped)
    dropped.add_metric(["unowned"], gc.unowned_dropped)
    yield dropped
    yield GaugeMetricFamily(
        "kvnode_gc_waiting",
        "Tombstones and expired versions past the grace period, kept until every replica of their key has "
        "completed a repair with this node (as the last GC pass found)",
        gc.waiting,
    )
    waiting_for = GaugeMetricFamily(
        "kvnode_gc_waiting_for_repair",
        "Of those, how many wait for a repair with each peer (as the last GC pass found)",
        labels=["peer"],
    )
    for peer in snapshot.peers:
        waiting_for.add_metric([peer.url], gc.waiting_for.get(peer.url, 0))
    yield waiting_for
    yield CounterMetricFamily(
        "kvnode_gc_unconfirmed",
        "Versions the GC rule allowed but kept: another replica did not answer, or held an older version",
        gc.unconfirmed,
    )


def _rebuild_metrics(snapshot: NodeSnapshot) -> Iterator[Metric]:
    rebuild = snapshot.rebuild
    state = GaugeMetricFamily(
        "kvnode_node_state",
        "1 for the state of this node's data: serving, rebuilding (its disk was lost), unknown (new data "
        "dir, no peer asked yet)",
        labels=["state"],
    )
    for name in NodeState:
        state.add_metric([name.value], 1 if name.value == rebuild.state else 0)
    yield state
    yield CounterMetricFamily(
        "kvnode_rebuild_records",
        "Records received by this node's rebuild since start",
        rebuild.records_received,
    )
    yield GaugeMetricFamily(
        "kvnode_rebuild_peers_done",
        "Peers this node's rebuild has completed a repair with",
        rebuild.peers_done,
    )


def _repair_metrics(repair: RepairFigures) -> Iterator[Metric]:
    exchanges = CounterMetricFamily(
        "kvnode_repair_exchanges", "Anti-entropy exchanges with a peer, by outcome", labels=["outcome"]
    )
    for outcome in ("completed", "failed"):
        exchanges.add_metric([outcome], repair.exchanges.get(outcome, 0))
    yield exchanges
    records = CounterMetricFamily(
        "kvnode_repair_records",
        "Records anti-entropy moved, by direction (sent, received), or refused for clock skew",
        labels=["direction"],
    )
    for direction in ("sent", "received", "refused"):
        records.add_metric([direction], repair.records.get(direction, 0))
    yield records
    yield CounterMetricFamily(
        "kvnode_repair_segments_compared", "Summary segments compared with peers", repair.segments_compared
    )
    yield CounterMetricFamily(
        "kvnode_repair_segments_differing",
        "Summary segments found to differ from a peer's",
        repair.segments_differing,
    )
    yield GaugeMetricFamily(
        "kvnode_repair_summaries_ready",
        "0 while the anti-entropy summaries are rebuilt from a scan (after a crash), else 1",
        1 if repair.summaries_ready else 0,
    )


def _add_histogram(family: HistogramMetricFamily, labels: list[str], buckets: FixedBuckets) -> None:
    family.add_metric(labels, list(zip(_BOUNDS, buckets.cumulative(), strict=True)), buckets.sum)
