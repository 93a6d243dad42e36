"""``run``: uvloop.run that Ctrl-C (SIGINT) and SIGTERM interrupt at once with KeyboardInterrupt.

uvloop runs Python-level signal handlers only when its loop wakes up for another reason, so a plain
``uvloop.run`` of a load run ignores Ctrl-C until the run ends. Handlers installed on the loop itself
wake it, cancel the work and surface as KeyboardInterrupt, which the commands turn into a clean stop.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

__all__ = ["run"]

T = TypeVar("T")


def run(work: Coroutine[Any, Any, T]) -> T:
    return uvloop.run(_until_interrupted(work))


async def _until_interrupted(work: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    # Removing a loop handler resets the signal to its default, so the caller's own handlers are put back.
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        loop.add_signal_handler(signum, interrupt)
    try:
        return await work
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            if handler is not None:
                signal.signal(signum, handler)
