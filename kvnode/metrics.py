"""Latency histograms shared by the node's stats, the load generator and the reports.

:class:`LatencyHistogram` (HdrHistogram) records microseconds and reports milliseconds;
:class:`FixedBuckets` counts seconds in the fixed buckets a Prometheus histogram exports;
:class:`CallMeter` is a replica's calls counted by outcome and timed in such buckets;
:class:`RecentLatency` is a recent percentile. The event loop's lag is kvnode.loop_lag's.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import math
from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

__all__ = [
    "LATENCY_BUCKETS_S",
    "PERCENTILES",
    "CallMeter",
    "FixedBuckets",
    "LatencyHistogram",
    "RecentLatency",
]

PERCENTILES = (50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0)
_HIGHEST_US = 3_600_000_000  # one hour: anything slower is recorded as an hour
# Upper bounds (seconds) of the buckets of every latency the node exports to Prometheus: from a local
# LevelDB call (~10 µs) to the longest replica timeout anyone sets.
LATENCY_BUCKETS_S = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class LatencyHistogram:
    """Microsecond latencies with 3 significant digits, from 1 µs to an hour.

    >>> h = LatencyHistogram()
    >>> for us in (100, 200, 300): h.record_us(us)
    >>> h.percentile_ms(50)
    0.2
    """

    def __init__(self, hdr: HdrHistogram | None = None) -> None:
        self.hdr = hdr if hdr is not None else HdrHistogram(1, _HIGHEST_US, 3)

    def record_us(self, micros: float, expected_interval_us: int = 0) -> None:
        value = min(max(int(micros), 1), _HIGHEST_US)
        if expected_interval_us:
            self.hdr.record_corrected_value(value, expected_interval_us)
        else:
            self.hdr.record_value(value)

    @property
    def count(self) -> int:
        return int(self.hdr.get_total_count())

    def percentile_ms(self, percentile: float) -> float:
        if percentile >= 100.0:
            return self.max_ms
        return float(self.hdr.get_value_at_percentile(percentile)) / 1000.0

    @property
    def max_ms(self) -> float:
        return float(self.hdr.get_max_value()) / 1000.0 if self.count else 0.0

    @property
    def mean_ms(self) -> float:
        return float(self.hdr.get_mean_value()) / 1000.0 if self.count else 0.0

    def summary_ms(self, percentiles: Iterable[float] = PERCENTILES) -> dict[str, float]:
        """{"p50": ms, ..., "max": ms} (p100 is named max)."""
        return {("max" if p >= 100.0 else f"p{p:g}"): round(self.percentile_ms(p), 3) for p in percentiles}

    def add(self, other: LatencyHistogram) -> None:
        self.hdr.add(other.hdr)

    def encode(self) -> str:
        """HdrHistogram's compressed base64 form, readable by every HdrHistogram implementation."""
        return str(self.hdr.encode().decode("ascii"))

    @classmethod
    def decode(cls, text: str) -> LatencyHistogram:
        return cls(HdrHistogram.decode(text.encode("ascii")))


# RecentLatency's buckets: 1 % wide from 1 µs to 10 s (1,621 bounds), so a percentile is within 0.5 %.
_RECENT_BOUNDS_S = tuple(1e-6 * 1.01**step for step in range(1621))


class RecentLatency:
    """A percentile of recent latencies, cheap enough to feed on every replica reply.

    Counts in buckets 1 % wide from 1 µs to 10 s, found by bisection (C): precise enough to pick a
    speculative delay, and a fifth of the cost of an HdrHistogram's record in Python. The percentile is
    recomputed at most every ``refresh_s``, because a query walks every bucket (docs/node-internals.md
    has both costs). The window starts afresh after ``window`` samples or ``window_s`` seconds, whichever
    comes first, so it follows the peer's present: counted in samples alone, a window filled during a
    burst outlived the burst at a low rate, and a slow peer looked no slower than the rest.

    >>> recent = RecentLatency(99.0, window_s=1.0, refresh_s=0.0)
    >>> for _ in range(100): recent.record(0.050)
    >>> round(recent.value_s(now=10.0), 3)   # the burst's samples, and the window starts afresh
    0.05
    >>> for _ in range(100): recent.record(0.002)
    >>> round(recent.value_s(now=10.5), 3)
    0.002
    """

    def __init__(
        self, percentile: float, *, window: int = 5000, window_s: float = 1.0, refresh_s: float = 0.25
    ) -> None:
        self.percentile = percentile
        self._window = window
        self._window_s = window_s
        self._refresh_s = refresh_s
        self._counts = [0] * (len(_RECENT_BOUNDS_S) + 1)  # the last one: above 10 s
        self._total = 0
        self._window_start = 0.0
        self._value_s: float | None = None
        self._computed_at = 0.0

    def record(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(_RECENT_BOUNDS_S, seconds)] += 1
        self._total += 1
        if self._total >= self._window:
            self._compute()
            self._reset()

    def value_s(self, now: float) -> float | None:
        """The percentile in seconds (None before any sample); ``now`` is a monotonic time."""
        if now - self._computed_at >= self._refresh_s and self._total:
            self._computed_at = now
            self._compute()
            if now - self._window_start >= self._window_s:
                self._window_start = now
                self._reset()
        return self._value_s

    def _reset(self) -> None:
        self._counts = [0] * len(self._counts)
        self._total = 0

    def _compute(self) -> None:
        """The percentile's bucket, valued at its geometric middle (the top bound for the last)."""
        rank = max(1, math.ceil(self._total * self.percentile / 100.0))
        index = bisect.bisect_left(list(itertools.accumulate(self._counts)), rank)
        bounds = _RECENT_BOUNDS_S
        if index == 0 or index >= len(bounds):
            self._value_s = bounds[min(index, len(bounds) - 1)]
        else:
            self._value_s = math.sqrt(bounds[index - 1] * bounds[index])


class FixedBuckets:
    """Counts of values (seconds) in fixed buckets since start, never reset: a Prometheus histogram's
    data without prometheus_client's per-observation lock, cheap enough for every request and replica
    call (docs/node-internals.md); a collector exports it at scrape time.

    >>> b = FixedBuckets((0.001, 0.01))
    >>> for seconds in (0.0005, 0.001, 0.002, 3.0): b.observe(seconds)
    >>> b.cumulative(), b.count
    ([2, 3, 4], 4)
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1  # a value equal to a bound is in it
        self.sum += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def copy(self) -> FixedBuckets:
        copied = FixedBuckets(self.bounds)
        copied.counts = list(self.counts)
        copied.sum = self.sum
        return copied

    def cumulative(self) -> list[int]:
        """How many values are <= each bound, then the total (the +Inf bucket)."""
        running, result = 0, []
        for count in self.counts:
            running += count
            result.append(running)
        return result


class CallMeter:
    """One replica's calls by (op, outcome) and their durations, fed where the replica settles each call
    (no callback of its own) and read when Prometheus scrapes; and how many times its channel was given up
    (the peer closed it, or was taken for dead).

    >>> meter = CallMeter()
    >>> meter.ended("read", "ok", 0.002); meter.calls["read", "ok"], meter.latency.count
    (1, 1)
    """

    __slots__ = ("calls", "drops", "latency")

    def __init__(self) -> None:
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self.latency = FixedBuckets()
        self.drops = 0

    def ended(self, op: str, outcome: str, seconds: float) -> None:
        self.calls[op, outcome] += 1
        latency = self.latency  # FixedBuckets.observe written out: once per replica call
        latency.counts[bisect.bisect_left(latency.bounds, seconds)] += 1
        latency.sum += seconds
