"""The one scheduling helper a node's background drivers share (anti-entropy, tombstone GC, rebuild, a
node's part in a membership change, the membership's exchanges with peers): the tasks a driver owns,
started with a name or without, stopped together; and every pause a driver takes (a retry, a pace, an
interval) through one ``sleep`` that a test replaces, so a driver runs in-process without real time.
:class:`Slice` is how a long loop (a scan, a rebuild, a listing) shares the event loop: no step of it
holds the loop for more than about ``SLICE_S`` (docs/overload.md).

>>> async def demo() -> list[str]:
...     slept: list[float] = []
...     async def no_wait(seconds: float) -> None:
...         slept.append(seconds)
...     tasks = Tasks("demo", sleep=no_wait)
...     async def work() -> None:
...         await tasks.sleep(5.0)
...     await tasks.spawn(work(), "once")
...     return [str(slept), str(tasks.running("once"))]
>>> asyncio.run(demo())
['[5.0]', 'False']
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["SLICE_S", "Sleep", "Slice", "Tasks", "next_beat"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
# How long one step of a long loop may hold the event loop: a fraction of the ~50 ms a request may wait
# behind one, since a few such loops (a listing, a scan, a repair, a rebuild) may run at once.
SLICE_S = 0.01


class Slice:
    """A long loop's share of the event loop: ``await slice.pause()`` after each item yields once the
    loop has been held for ``budget_s`` since the last yield, and costs a clock read otherwise, so the
    step is bounded in time whatever an item costs (on a loaded machine, several times more).

    >>> async def count(items: int) -> int:
    ...     share, done = Slice(budget_s=0.0), 0
    ...     for _ in range(items):
    ...         done += 1
    ...         await share.pause()  # with no budget, a yield after every item
    ...     return done
    >>> asyncio.run(count(3))
    3
    """

    __slots__ = ("_budget_s", "_until")

    def __init__(self, budget_s: float = SLICE_S) -> None:
        self._budget_s = budget_s
        self._until = time.perf_counter() + budget_s

    async def pause(self) -> None:
        if time.perf_counter() >= self._until:
            await asyncio.sleep(0)
            self._until = time.perf_counter() + self._budget_s


class Tasks:
    """The background tasks of one driver (``owner`` names them in asyncio's task names)."""

    def __init__(self, owner: str, sleep: Sleep = asyncio.sleep) -> None:
        self.owner = owner
        self.sleep = sleep
        self._all: set[asyncio.Task[Any]] = set()
        self._named: dict[str, asyncio.Task[Any]] = {}

    def spawn(self, coroutine: Coroutine[Any, Any, T], name: str = "") -> asyncio.Task[T]:
        """Run ``coroutine`` as one of this driver's tasks; call inside the running event loop. A named
        task can be found again (:meth:`running`, :meth:`named`)."""
        label = f"{self.owner}: {name}" if name else self.owner
        task = asyncio.get_running_loop().create_task(coroutine, name=label)
        self._all.add(task)
        task.add_done_callback(self._all.discard)
        if name:
            self._named[name] = task
        return task

    def named(self, name: str) -> asyncio.Task[Any] | None:
        return self._named.get(name)

    def running(self, name: str) -> bool:
        task = self._named.get(name)
        return task is not None and not task.done()

    async def stop(self) -> None:
        """Cancel every task of this driver and wait until each has ended."""
        tasks = list(self._all)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def finish(self) -> None:
        """Wait until every task of this driver has ended by itself (none is cancelled)."""
        await asyncio.gather(*self._all, return_exceptions=True)


def next_beat(now: float, interval: float) -> float:
    """When the beat after one at ``now`` is due: the next multiple of ``interval`` on the node's loop
    clock, so that what beats on one grid falls due together and wakes the loop once: the heartbeats to all
    its peers (kvnode.replica.heartbeat), and the loop-lag monitor's ticks while the loop is quiet
    (kvnode.loop_lag). ``now`` is rounded to the nearest multiple first: a beat run a little early or late
    (timers run on a clock read once per loop iteration) is still followed by the next one.

    >>> next_beat(10.001, 0.25), next_beat(9.999, 0.25), next_beat(10.1, 0.25)
    (10.25, 10.25, 10.25)
    """
    return (round(now / interval) + 1) * interval
