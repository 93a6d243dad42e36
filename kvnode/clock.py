"""The coordinator's write clock: microsecond timestamps that never go backwards within a process."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["WriteClock"]


class WriteClock:
    """Wall-clock microseconds, bumped past the last value handed out.

    Strictly increasing, so two writes through one coordinator are always ordered as they were issued,
    even when the wall clock steps back (NTP) or two writes land in the same microsecond.
    """

    def __init__(self, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self._wall_ns = wall_ns
        self._last = 0

    def now(self) -> int:
        stamp = self._wall_ns() // 1000
        if stamp <= self._last:
            stamp = self._last + 1
        self._last = stamp
        return stamp
