"""One constant-rate run sent by several generator processes together, results merged.

A Python process can only send so many requests a second before its own CPU, not the server, sets the
pace. :class:`GeneratorPool` keeps ``workers`` processes (fresh interpreters: no event loop or sockets
inherited) that each run a :class:`~loadtest.openloop.Share` of the schedule: request i is sent by worker
``i % workers``, so their requests interleave as one schedule would. They start together: each opens its
connections and says so, then all get the same start time on the monotonic clock, which is one clock
for every process of the machine. Their results come back as plain data and are merged
(HdrHistograms added), CPU summed over the workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any, cast

from kvnode.ops.processes import die_with_parent
from loadtest import interruptible
from loadtest.openloop import REQUEST_TIMEOUT, run_rate
from loadtest.rate_result import RateResult, Share
from loadtest.workload import Workload

__all__ = ["GeneratorPool", "WorkerError"]

_START_AFTER_S = 0.1  # between the last worker saying it is ready and the schedule's start
_STOP_TIMEOUT_S = 5.0


class WorkerError(RuntimeError):
    """A worker process failed or died; the message says which and why."""


class GeneratorPool:
    """``workers`` generator processes, started on enter and stopped (by PID) on exit; reusable for
    many runs, so a rate search pays for starting them once.

    >>> with GeneratorPool(2) as pool:  # nothing listens on port 9: every request fails to connect
    ...     result = pool.run(["http://127.0.0.1:9"], Workload("get"), rate=100, duration=0.2, connections=2)
    >>> result.workers, result.requests, dict(result.errors)
    (2, 20, {'connection': 20})
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("workers must be positive")
        self.workers = workers
        self._processes: list[BaseProcess] = []
        self._pipes: list[Connection] = []

    def __enter__(self) -> GeneratorPool:
        context = multiprocessing.get_context("spawn")
        try:
            for _ in range(self.workers):
                mine, theirs = context.Pipe()
                process = context.Process(target=_serve, args=(theirs,), daemon=True)
                process.start()
                theirs.close()
                self._processes.append(process)
                self._pipes.append(mine)
        except BaseException:
            self.close(interrupted=True)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close(interrupted=error is not None)

    def close(self, interrupted: bool = False) -> None:
        """Stop every worker: asked to exit after a run, SIGTERM at once when ``interrupted`` (it may be
        mid-run), SIGKILL for any still there after a grace period. By PID, never by name."""
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            if interrupted:
                process.terminate()
            else:
                with contextlib.suppress(OSError):  # a worker that already died
                    pipe.send(None)
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        for pipe in self._pipes:
            pipe.close()
        self._processes, self._pipes = [], []

    def run(
        self,
        urls: Sequence[str],
        workload: Workload,
        rate: float,
        duration: float,
        connections: int,
        token_aware: bool = False,
    ) -> RateResult:
        """One run of ``rate * duration`` requests over every worker; ``connections`` in total;
        ``token_aware``: see :func:`~loadtest.openloop.run_rate`."""
        if not self._processes:
            raise RuntimeError("the pool is not started (use it in a with block)")
        per_worker = max(1, connections // self.workers)
        for index, pipe in enumerate(self._pipes):
            job = {
                "urls": list(urls),
                # Each worker its own key sequence, all reproducible from the workload's seed.
                "workload": dataclasses.replace(workload, seed=workload.seed + index),
                "rate": rate,
                "duration": duration,
                "connections": per_worker,
                "share": Share(index, self.workers),
                "token_aware": token_aware,
            }
            pipe.send(job)
        self._collect("ready", deadline=time.monotonic() + REQUEST_TIMEOUT + 30)
        start = time.monotonic() + _START_AFTER_S
        for pipe in self._pipes:
            pipe.send(start)
        answers = self._collect("result", deadline=start + duration + 2 * REQUEST_TIMEOUT + 30)
        results = [RateResult.from_wire(answer) for answer in answers]
        merged = results[0]
        for other in results[1:]:
            merged.merge(other)
        return merged

    def _collect(self, kind: str, deadline: float) -> list[Any]:
        """Every worker's next message, which must be of ``kind``, in worker order."""
        answers: dict[int, Any] = {}
        while len(answers) < self.workers:
            waiting = [pipe for index, pipe in enumerate(self._pipes) if index not in answers]
            ready = wait(waiting, timeout=min(1.0, max(0.0, deadline - time.monotonic())))
            for item in ready:
                pipe = cast(Connection, item)  # wait() returns some of the pipes it was given
                index = self._pipes.index(pipe)
                try:
                    message_kind, body = pipe.recv()
                except EOFError:
                    raise WorkerError(f"generator worker {index} died") from None
                if message_kind != kind:
                    raise WorkerError(f"generator worker {index} failed:\n{body}")
                answers[index] = body
            if len(answers) < self.workers and time.monotonic() >= deadline:
                raise WorkerError(f"generator workers did not answer in time (waiting for {kind!r})")
        return [answers[index] for index in range(self.workers)]


def _serve(pipe: Connection) -> None:
    """A worker process: runs jobs from the pipe until told to stop (None) or interrupted."""
    die_with_parent()

    def handshake() -> float:
        # Blocking the event loop here is fine: the run has not started, the connections are idle.
        pipe.send(("ready", None))
        start: float = pipe.recv()
        return start

    try:
        while (job := pipe.recv()) is not None:
            try:
                result = interruptible.run(run_rate(**job, start=handshake))
            except Exception:
                pipe.send(("error", traceback.format_exc()))
                continue
            pipe.send(("result", result.to_wire()))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass  # the parent was interrupted or went away; it stops the rest
