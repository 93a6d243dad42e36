"""The event loop's lag, and what the node does about it (docs/overload.md): :class:`LoopLagMonitor`
measures how late the loop runs what is due, and :class:`Starvation` judges from each tick when the node
sheds client requests and when its background work waits.
"""

from __future__ import annotations

import asyncio
import time

from kvnode.metrics import FixedBuckets, LatencyHistogram
from kvnode.scheduling import next_beat

__all__ = ["LoopLagMonitor", "Starvation", "is_quiet"]


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


# A loop that ran under this share of the time since the last tick is quiet (LoopLagMonitor): with a
# queue that short, the lag stays a small part of a step.
_QUIET_SHARE = 0.25


class LoopLagMonitor:
    """How late the event loop runs what is due: the wait behind queued callbacks and behind one long
    step alike.

    A timer is always pending; how late it runs is how long the loop was held past its due time, so a
    300 ms callback is seen as about 300 ms. (A probe sent with ``call_soon`` after a sleep, as this
    monitor did before, saw only the queue behind it: the sleep's own late wake-up hid a long step.) A
    step at least an interval long always spans a tick's due time, and is seen as its length less at most
    an interval; a shorter one is seen when a tick falls due within it, in proportion to its length, so a
    job of many such steps is seen at about their length.

    The interval is ``interval`` (50 ms) while the loop is behind or busy, and ``quiet_interval`` while it
    is quiet: the last tick on time (under the starvation's calm threshold) and the loop's thread running
    under a quarter of the time since the one before, when its queue holds a small part of a step and no
    lag worth shedding for can build between two ticks. Quiet ticks fall on the heartbeats' grid
    (kvnode.scheduling.next_beat): an idle node wakes for both at once. Each tick wakes an idle node; at
    100 a second they were a third of an idle cluster's CPU, at 20 still about a third (docs/overload.md).

    ``histogram`` is a window that ``reset`` restarts (the profiler's runs), with ``window_ran_s``: of the
    window's lags, the longest spent running on the loop's own thread (its CPU time), a long step, not the
    process waiting for a core on a shared machine. ``since_start`` never resets (Prometheus);
    ``starvation`` judges each tick.
    """

    def __init__(
        self, interval: float = 0.05, starvation: Starvation | None = None, quiet_interval: float = 0.25
    ) -> None:
        self.interval = interval
        self.quiet_interval = quiet_interval
        self.starvation = starvation if starvation is not None else Starvation()
        self.histogram = LatencyHistogram()
        self.since_start = FixedBuckets()
        self.worst_s = 0.0  # the worst lag since start
        self.window_ran_s = 0.0
        self._due = 0.0
        self.quiet = False  # whether the pending tick is a quiet one (on the beats' grid)
        self._waits = 0.0  # how long the pending tick was scheduled to wait
        self._cpu_at = 0.0  # the loop thread's CPU time when the pending tick was scheduled
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._schedule(asyncio.get_running_loop(), quiet=False)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def reset(self) -> None:
        self.histogram = LatencyHistogram()
        self.window_ran_s = 0.0

    def _schedule(self, loop: asyncio.AbstractEventLoop, quiet: bool) -> None:
        self.quiet = quiet and self.quiet_interval > self.interval
        now = loop.time()
        due = next_beat(now, self.quiet_interval) if self.quiet else now + self.interval
        self._waits = due - now
        self._due = time.perf_counter() + self._waits
        self._cpu_at = time.thread_time()
        self._timer = loop.call_at(due, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.perf_counter()
        # uvloop's timers run on a clock cached per loop iteration, in whole milliseconds: one may run a
        # little early, which is no lag.
        lag = max(0.0, now - self._due)
        self.histogram.record_us(lag * 1e6)
        self.since_start.observe(lag)
        self.worst_s = max(self.worst_s, lag)
        used = time.thread_time() - self._cpu_at
        # CPU beyond what the wait may have used: a step running. A quiet wait is taken to have used
        # under a quarter of its length, as the one before it did.
        ran = used - (_QUIET_SHARE * self._waits if self.quiet else self._waits)
        self.window_ran_s = max(self.window_ran_s, min(ran, lag))
        self.starvation.observe(lag, now)
        self._schedule(loop, is_quiet(lag, used, self._waits, calm_s=self.starvation.exit_s))


def is_quiet(lag_s: float, used_s: float, waited_s: float, *, calm_s: float) -> bool:
    """Whether the loop is quiet after a tick ``lag_s`` late, its thread having used ``used_s`` of CPU in
    the ``waited_s`` + ``lag_s`` since the tick was scheduled: on time (under ``calm_s``), and running
    under a quarter of the time.

    >>> is_quiet(0.001, 0.002, 0.05, calm_s=0.02)  # an idle node
    True
    >>> is_quiet(0.001, 0.03, 0.05, calm_s=0.02)  # on time, but running 60 % of the time
    False
    >>> is_quiet(0.08, 0.0, 0.25, calm_s=0.02)  # late: behind, or waiting for a core
    False
    """
    return lag_s < calm_s and used_s < _QUIET_SHARE * (waited_s + lag_s)
