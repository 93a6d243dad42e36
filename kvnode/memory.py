"""Memory given back to the system after large values have passed through the node: glibc's malloc
tuned (through ctypes) and a settler that collects and trims after them.

glibc serves a block above its mmap threshold from a mapping of its own, unmapped when freed; but it
raises that threshold to the size of each such block freed (up to 32 MiB), so after the first large body
the next ones come from the heap, whose freed space it keeps. A fixed threshold stops that: every large
body is mapped and given back when freed. Fewer arenas (one per thread by default, up to eight per core)
leave less freed space scattered where no trim finds it worth returning.

A body can also outlive its request: an exception's traceback that refers to it in a reference cycle
pins it until the garbage collector runs, and after a burst nothing allocates enough to run it. So the
:class:`Settler`, told the bytes of each large value that passed (kvnode.access.admission, the hint delivery)
and of each TLS connection (kvnode.access.listening: its buffers, and the objects of one that never
handshook, which only the collector frees), collects cyclic garbage and trims the heap once enough have
passed, at most every few seconds.
Without glibc, the tuning and the trim do nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
from collections.abc import Awaitable, Callable

__all__ = ["Settler", "tune_malloc"]

_M_MMAP_THRESHOLD = -3  # mallopt's parameter numbers (malloc.h)
_M_ARENA_MAX = -8
# Blocks this large or larger get a mapping of their own: request bodies, replica frames, hints. Smaller
# ones (aiohttp's read chunks, most values) stay in the heap, where allocating costs no system call.
_MAP_FROM_BYTES = 1024 * 1024
_ARENAS = 2  # the event loop's thread and LevelDB's background one do most of the allocating
_LARGE_VALUE_BYTES = 64 * 1024  # a value this large or larger counts for the Settler


def _libc() -> ctypes.CDLL | None:
    # The process's own symbols, libc's among them: ctypes.util.find_library would run `ldconfig -p`
    # in a child process at every import (every node, launcher and admin command).
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (glibc's: absent elsewhere)
    except (OSError, AttributeError, TypeError):
        return None
    return libc


_LIBC = _libc()


def tune_malloc() -> None:
    """Fix malloc's mmap threshold and bound its arenas (see the module's docstring). Call it before the
    process starts threads."""
    if _LIBC is not None:
        _LIBC.mallopt(_M_MMAP_THRESHOLD, _MAP_FROM_BYTES)
        _LIBC.mallopt(_M_ARENA_MAX, _ARENAS)


class Settler:
    """Collects cyclic garbage and gives the heap's free memory back once ``threshold`` bytes of large
    values have passed, or when values stopped passing, checking every ``interval`` seconds (through
    ``sleep``, which a test replaces). Create and start it in the event loop."""

    def __init__(
        self,
        threshold: int = 64 * 1024 * 1024,
        interval: float = 2.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._threshold = threshold
        self._interval = interval
        self._sleep = sleep
        self._passed = 0
        self.settled = 0  # times it collected and trimmed
        self._task: asyncio.Task[None] | None = None

    def passed(self, size: int) -> None:
        """A value of ``size`` bytes went through; only large ones count (small ones keep allocating, so
        the collector runs on its own, and a settle per 64 MiB of them would only cost time)."""
        if size >= _LARGE_VALUE_BYTES:
            self._passed += size

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        checked = 0  # bytes passed at the last check
        # A settle during a stream runs while the last values' replica calls and writes may still hold
        # them (they count once answered), so one more is owed when the stream ends.
        owed = False
        while True:
            await self._sleep(self._interval)
            if self._passed >= self._threshold:
                owed = True
                self._settle()
            elif self._passed == checked and (self._passed or owed):
                owed = False
                self._settle()
            checked = self._passed

    def _settle(self) -> None:
        self._passed = 0
        self.settled += 1
        gc.collect()
        if _LIBC is not None:
            _LIBC.malloc_trim(0)
