"""kvnode.memory's Settler, its checks driven one at a time by a sleep the test releases: it settles once
enough large values passed, or once values stopped passing, and small values never count. (Whether the
memory comes back is tests/cluster/test_limits.py's, on a real node.)"""

from __future__ import annotations

import asyncio

from kvnode import memory
from kvnode.memory import Settler, tune_malloc

KIB = 1024
LARGE = 64 * KIB  # the smallest value that counts


class Checks:
    """A Settler's ``sleep``: each pause lasts until the test calls :meth:`next`, which returns once the
    check that follows it has run (the settler is pausing again)."""

    def __init__(self) -> None:
        self._go: asyncio.Queue[None] = asyncio.Queue()
        self.pauses = 0

    async def __call__(self, seconds: float) -> None:
        self.pauses += 1
        await self._go.get()

    async def next(self) -> None:
        pauses = self.pauses
        self._go.put_nowait(None)
        for _ in range(1000):
            if self.pauses > pauses:
                return
            await asyncio.sleep(0)
        raise AssertionError("the settler did not pause again")

    async def started(self, settler: Settler) -> None:
        settler.start()
        for _ in range(1000):
            if self.pauses:
                return
            await asyncio.sleep(0)
        raise AssertionError("the settler never paused")


async def test_it_settles_once_the_threshold_passed_during_a_stream_and_once_more_when_it_ends() -> None:
    checks = Checks()
    settler = Settler(threshold=4 * LARGE, sleep=checks)
    await checks.started(settler)
    try:
        settler.passed(2 * LARGE)
        await checks.next()
        assert settler.settled == 0  # below the threshold, and still passing
        settler.passed(2 * LARGE)
        await checks.next()
        assert settler.settled == 1
        settler.passed(4 * LARGE)
        await checks.next()
        assert settler.settled == 2  # the stream goes on past the threshold again
        await checks.next()
        assert settler.settled == 3  # it ended: what its last values' calls held is freed by now
        await checks.next()
        await checks.next()
        assert settler.settled == 3  # and then it rests
    finally:
        await settler.stop()


async def test_it_settles_once_more_when_values_stop_passing_and_then_rests() -> None:
    checks = Checks()
    settler = Settler(threshold=100 * LARGE, sleep=checks)
    await checks.started(settler)
    try:
        settler.passed(LARGE)
        await checks.next()  # values are passing
        assert settler.settled == 0
        await checks.next()  # none since the last check
        assert settler.settled == 1
        await checks.next()
        await checks.next()
        assert settler.settled == 1  # nothing passed since it settled
    finally:
        await settler.stop()


async def test_small_values_never_count() -> None:
    checks = Checks()
    settler = Settler(threshold=LARGE, sleep=checks)
    await checks.started(settler)
    try:
        for _ in range(100):
            settler.passed(LARGE - 1)
        await checks.next()
        await checks.next()
        assert settler.settled == 0
    finally:
        await settler.stop()


async def test_stop_ends_the_settler_and_a_settler_never_started_stops() -> None:
    checks = Checks()
    settler = Settler(sleep=checks)
    await checks.started(settler)
    await settler.stop()
    await Settler().stop()


def test_tuning_malloc_is_safe_to_call_again() -> None:
    """It only sets malloc's parameters (nothing to observe from Python); without glibc it does nothing."""
    tune_malloc()
    tune_malloc()


def test_glibc_is_found_without_starting_a_process() -> None:
    """Found in the process's own symbols: ctypes.util.find_library ran `ldconfig -p` in a child at every
    import of the module, a child the launcher's tests saw as a node started (this suite refuses it)."""
    libc = memory._libc()
    assert libc is not None and libc.malloc_trim(0) in (0, 1)
