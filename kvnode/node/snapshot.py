"""One snapshot of a node's state: its figures, read at once (by kvnode.node.parts.NodeParts.snapshot) from
each part's counters by that part's table (kvnode.figures), so ``/v0/stats``, ``/v0/cluster`` and
``/metrics`` cannot disagree on what a figure is or means."""

from __future__ import annotations

from dataclasses import dataclass

from kvnode.figures import Reading
from kvnode.metrics import FixedBuckets

__all__ = ["NodeSnapshot"]


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    readings: tuple[Reading, ...]  # every part's figures, in the order /v0/stats shows them
    peers: tuple[tuple[str, Reading], ...]  # each peer's URL and figures, in the cluster's order
    protocols: str  # the replica protocol versions this node speaks, "1-2" (kvnode.replica.channel.protocol)
    loop_lag_samples: int  # in the loop-lag window (since start or the last ``/v0/stats?reset=1``)
    loop_lag_ms: dict[str, float]  # that window's percentiles ({"p50": ms, ..., "max": ms})
    loop_lag_since_start: FixedBuckets  # every sample since start, in Prometheus's buckets
    loop_lag_worst_s: float  # the worst lag since start
    loop_lag_ran_s: float  # of the window's lags, the longest spent running on the loop's thread (a step)

    @property
    def peer_urls(self) -> list[str]:
        return [url for url, _ in self.peers]

    def reading(self, group: str) -> Reading:
        """The figures of the table named ``group``."""
        return next(reading for reading in self.readings if reading.table.group == group)
