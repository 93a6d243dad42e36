"""A peer's heartbeat timer: four beats a replica timeout, each due at the next point of the node's beat
grid (``kvnode.scheduling.next_beat``), so that a node's beats to all its peers wake its loop once. What a
beat does (ask the failure detector, ping or measure the clock) is the peer replica's (kvnode.replica.peer);
whether it pings, its ``PeerLife.pings``. Create it inside the running event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kvnode.scheduling import next_beat

__all__ = ["BEATS_PER_TIMEOUT", "Heartbeat", "beat_interval"]

# Quiet connections are pinged several times a timeout: the failure detector learns an idle peer's pace.
BEATS_PER_TIMEOUT = 4


def beat_interval(timeout: float) -> float:
    """Seconds between beats for a replica ``timeout`` in seconds: the loop-lag monitor's quiet ticks fall
    on the same grid (kvnode.loop_lag)."""
    return timeout / BEATS_PER_TIMEOUT


class Heartbeat:
    """Calls ``beat`` at the next point of the grid (beats ``interval`` seconds apart) once started; each
    beat starts it again for the next, unless it gives the channel up."""

    __slots__ = ("_beat", "_loop", "_timer", "interval")

    def __init__(self, timeout: float, beat: Callable[[], None]) -> None:
        self.interval = beat_interval(timeout)
        self._beat = beat
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._timer = self._loop.call_at(next_beat(self._loop.time(), self.interval), self._beat)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
