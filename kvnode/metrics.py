"""Latency histograms shared by the node's stats, the load generator and the reports, and the event
loop's lag.

:class:`LatencyHistogram` (HdrHistogram) records microseconds and reports milliseconds;
:class:`FixedBuckets` counts seconds in the fixed buckets a Prometheus histogram exports;
:class:`CallMeter` is a replica's calls counted by outcome and timed in such buckets;
:class:`LoopLagMonitor` measures the loop's lag, and :class:`Starvation` judges from it when the node
sheds client requests and when its background work waits (docs/overload.md).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
import math
import time
from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

__all__ = [
    "LATENCY_BUCKETS_S",
    "PERCENTILES",
    "CallMeter",
    "FixedBuckets",
    "LatencyHistogram",
    "LoopLagMonitor",
    "RecentLatency",
    "Starvation",
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
        self.latency.observe(seconds)


class Starvation:
    """Whether the event loop is starved (admission sheds new client requests then, while they queue:
    kvnode.access.admission), judged from its lag with hysteresis, so that it does not flap:
    ``shedding`` turns on once every tick has been at least ``enter_s`` late for ``window_s`` (one long
    step does not: only a loop that stays behind), and off once every tick has been under ``exit_s`` for
    ``window_s``. ``busy`` (shedding, or the last tick late by ``exit_s``) is when background work
    (hints, repair) waits for a calm tick: it yields the loop to client traffic. Pure but for ``calm``.

    >>> s = Starvation(enter_s=0.1, exit_s=0.02, window_s=1.0)
    >>> for t in (0.0, 0.5, 1.0): s.observe(0.3, now=t)
    >>> s.shedding, s.busy
    (True, True)
    >>> for t in (1.1, 1.6): s.observe(0.001, now=t)
    >>> s.shedding   # calm for less than the window
    True
    >>> s.observe(0.001, now=2.1); s.shedding, s.busy
    (False, False)
    """

    def __init__(self, enter_s: float = 0.1, exit_s: float = 0.02, window_s: float = 1.0) -> None:
        self.enter_s, self.exit_s, self.window_s = enter_s, exit_s, window_s
        self.shedding = False
        self.last_s = 0.0  # the last tick's lag
        self._late_since: float | None = None  # since when every tick was enter_s late
        self._calm_since: float | None = None  # since when every tick was under exit_s
        self._calm = asyncio.Event()  # set on a calm tick: what ``calm`` waits for

    @property
    def busy(self) -> bool:
        return self.shedding or self.last_s >= self.exit_s

    def observe(self, lag_s: float, now: float) -> None:
        """A tick ``lag_s`` late at ``now`` (a monotonic time)."""
        self.last_s = lag_s
        late, calm = lag_s >= self.enter_s, lag_s < self.exit_s
        self._late_since = (now if self._late_since is None else self._late_since) if late else None
        self._calm_since = (now if self._calm_since is None else self._calm_since) if calm else None
        if self._late_since is not None and now - self._late_since >= self.window_s:
            self.shedding = True
        elif self._calm_since is not None and now - self._calm_since >= self.window_s:
            self.shedding = False
        if self.busy:
            self._calm.clear()
        else:
            self._calm.set()

    async def calm(self) -> None:
        """Return at once unless the loop is busy; else once it is not (background work calls this
        before each batch)."""
        while self.busy:
            await self._calm.wait()


class LoopLagMonitor:
    """How late the event loop runs what is due: the wait behind queued callbacks and behind one long
    step alike.

    A timer is always pending (a tick every ``interval``); how late it runs is how long the loop was held
    past its due time, so a 300 ms callback is seen as about 300 ms. (A probe sent with ``call_soon``
    after a sleep, as this monitor did before, saw only the queue behind it: the sleep's own late wake-up
    hid a long step.) A step at least an interval long always spans a tick's due time, and is seen as its
    length less at most an interval; a shorter one is seen when a tick falls due within it, in proportion
    to its length, so a job of many such steps is seen at about their length. 50 ms, not 10: each tick
    wakes an idle node, and at 100 a second they were a third of an idle cluster's CPU (docs/overload.md).
    ``histogram`` is a window that ``reset`` restarts (the profiler's runs), with
    ``window_ran_s``: of the window's lags, the longest spent running on the loop's own thread (its CPU
    time), a long step, not the process waiting for a core on a shared machine. ``since_start`` never
    resets (Prometheus); ``starvation`` judges each tick.
    """

    def __init__(self, interval: float = 0.05, starvation: Starvation | None = None) -> None:
        self.interval = interval
        self.starvation = starvation if starvation is not None else Starvation()
        self.histogram = LatencyHistogram()
        self.since_start = FixedBuckets()
        self.worst_s = 0.0  # the worst lag since start
        self.window_ran_s = 0.0
        self._due = 0.0
        self._cpu_at = 0.0  # the loop thread's CPU time when the pending tick was scheduled
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._schedule(asyncio.get_running_loop())

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def reset(self) -> None:
        self.histogram = LatencyHistogram()
        self.window_ran_s = 0.0

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._due = time.perf_counter() + self.interval
        self._cpu_at = time.thread_time()
        self._timer = loop.call_later(self.interval, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.perf_counter()
        # uvloop's timers run on a clock cached per loop iteration, in whole milliseconds: one may run a
        # little early, which is no lag.
        lag = max(0.0, now - self._due)
        self.histogram.record_us(lag * 1e6)
        self.since_start.observe(lag)
        self.worst_s = max(self.worst_s, lag)
        ran = time.thread_time() - self._cpu_at - self.interval  # CPU beyond the interval: a step running
        self.window_ran_s = max(self.window_ran_s, min(ran, lag))
        self.starvation.observe(lag, now)
        self._schedule(loop)
