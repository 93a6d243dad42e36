"""The node's Prometheus metrics: one registry per process (never the global one) and the collector of
every ``kvnode_*`` metric in it, rendered for ``GET /metrics``.

The hot path only adds to plain counters: each client request to one :class:`~kvnode.metrics.FixedBuckets`
per (operation, status), where kvnode.node.client_api answers it, each replica call to its replica's
:class:`~kvnode.metrics.CallMeter`, where the replica settles the call (no callback of its own: asyncio
would schedule one per call). prometheus_client's own Counter and Histogram children lock on every
observation, which costs more per request than the request's own bookkeeping. Everything else the node
counts is read when Prometheus scrapes, from one :class:`~kvnode.node.snapshot.NodeSnapshot`, each figure
a metric as its part's table describes it (kvnode.figures). docs/node-internals.md has the costs and how
to measure them.

Every (operation, status) a handler is known to answer has its series from the start, at 0, so a dashboard
or an alert sees a zero rather than nothing (Prometheus's guidance for known label sets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kvnode.figures import Kind
from kvnode.metrics import LATENCY_BUCKETS_S, CallMeter, FixedBuckets
from kvnode.node.snapshot import NodeSnapshot
from kvnode.topology.epoch import Epoch

__all__ = ["MeteredReplica", "NodeMetrics"]

_FAMILIES = {Kind.COUNTER: CounterMetricFamily, Kind.GAUGE: GaugeMetricFamily}
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
        self._histograms: list[tuple[str, str, str, Mapping[str, FixedBuckets]]] = []
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

    def histograms(self, name: str, help: str, label: str, buckets: Mapping[str, FixedBuckets]) -> None:
        """Export ``buckets`` (a part's, observed on its path) at every scrape as the histogram ``name``,
        one series per key, labelled ``label``."""
        self._histograms.append((name, help, label, buckets))

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
        for name, help, label, by_label in self._histograms:
            family = HistogramMetricFamily(name, help, labels=[label])
            for value, buckets in sorted(by_label.items()):
                _add_histogram(family, [value], buckets)
            yield family
        yield from _replica_metrics(self._replicas)
        if self._snapshot is not None:
            yield from _figure_metrics(self._snapshot())

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
        "as coordinator and for read repair; hint: a hinted write delivered; forward: a write sent to "
        "another datacenter's forwarder) and outcome (ok, timeout, unavailable, overloaded, rejected, ...)",
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


def _figure_metrics(snapshot: NodeSnapshot) -> Iterator[Metric]:
    """Every part's numbers as their tables describe them (kvnode.figures); figures that share a metric
    (by a label of their own) are one family, each peer's labelled with its URL."""
    families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
    peers = snapshot.peer_urls
    for labels, reading in [((), r) for r in snapshot.readings] + [((url,), r) for url, r in snapshot.peers]:
        names = ["peer"] if labels else []
        for figure in reading.table.rows:
            if figure.kind is Kind.TEXT:
                continue
            family = families.get(figure.metric)
            if family is None:
                family = families[figure.metric] = _FAMILIES[figure.kind](
                    figure.metric, figure.help, labels=[*names, *figure.label_names]
                )
            for own, value in figure.samples(reading.values[figure.source], peers):
                family.add_metric([*labels, *own], value)
    yield from families.values()
    lag = HistogramMetricFamily(
        "kvnode_event_loop_lag_seconds",
        "How late the event loop runs a timer that is due: behind queued callbacks or one long step",
    )
    _add_histogram(lag, [], snapshot.loop_lag_since_start)
    yield lag
    yield GaugeMetricFamily(
        "kvnode_event_loop_lag_max_seconds", "The worst event-loop lag since start", snapshot.loop_lag_worst_s
    )


def _add_histogram(family: HistogramMetricFamily, labels: list[str], buckets: FixedBuckets) -> None:
    family.add_metric(labels, list(zip(_BOUNDS, buckets.cumulative(), strict=True)), buckets.sum)
