"""The one scheduling helper a node's background drivers share (anti-entropy, tombstone GC, rebuild, a
node's part in a membership change, the membership's exchanges with peers): the tasks a driver owns,
started with a name or without, stopped together; and every pause a driver takes (a retry, a pace, an
interval) through one ``sleep`` that a test replaces, so a driver runs in-process without real time.

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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["Sleep", "Tasks"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


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
