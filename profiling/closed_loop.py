"""A bounded closed-loop load: keep-alive connections opened once, each sending its next request as its
answer arrives, so a load of N requests is exactly N, at a fixed concurrency (profiling.counts).

Its HTTP client is the load generator's lean one (loadtest.httpclient): a few µs of Python a request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable, Iterator

from loadtest.httpclient import HttpConnection, RequestEncoder, host_port
from loadtest.workload import Workload
from profiling.load import LoadError

__all__ = ["REQUEST_TIMEOUT_S", "WARM_UP", "ClosedLoop", "warmed_loop"]

WARM_UP = 500  # requests before a measured load: connections open, caches warm
REQUEST_TIMEOUT_S = 10.0  # no answer for this long: the load fails


class ClosedLoop:
    """``connections`` keep-alive connections to ``url``, opened once, each sending its next request of
    ``workload`` as its answer arrives: a warm-up and the measured load share them, so no connection is
    opened while counting."""

    def __init__(self, url: str, workload: Workload, connections: int) -> None:
        self.url = url
        host, port = host_port(url)
        self._encoder = RequestEncoder(workload, url)
        self._pool = [HttpConnection(host, port, 0, self._answered) for _ in range(connections)]
        self._left = 0
        self._outcomes: collections.Counter[str] = collections.Counter()
        self._progress = asyncio.Event()

    async def open(self) -> None:
        """Connect every connection; LoadError if one cannot."""
        try:
            for connection in self._pool:
                await connection.connect()
        except OSError as error:
            raise LoadError(f"cannot connect to {self.url}: {error}") from None

    async def run(self, requests: int) -> collections.Counter[str]:
        """Send ``requests`` requests and wait for every answer: their outcomes by status (or by failure:
        "connection", ...). LoadError when no answer comes for REQUEST_TIMEOUT_S (a connection the server
        closed sends no more)."""
        self._left, self._outcomes = requests, collections.Counter()
        for connection in self._pool:
            if self._left and connection.connected:
                self._send(connection)
        while self._outcomes.total() < requests:
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), REQUEST_TIMEOUT_S)
            except TimeoutError:
                raise LoadError(f"{self.url}: no answer for {REQUEST_TIMEOUT_S:g} s") from None
        return self._outcomes

    def close(self) -> None:
        for connection in self._pool:
            connection.close()

    def _send(self, connection: HttpConnection) -> None:
        self._left -= 1
        connection.send(self._encoder.next()[0])

    def _answered(self, connection: HttpConnection, outcome: str) -> None:
        self._outcomes[outcome] += 1
        self._progress.set()
        if self._left and connection.connected:
            self._send(connection)


@contextlib.contextmanager
def warmed_loop(url: str, workload: Workload, connections: int) -> Iterator[Callable[[int], dict[str, int]]]:
    """A closed loop to ``url`` in an event loop of its own, warmed up (WARM_UP requests): a function that
    sends N requests and returns their answers by status."""
    with asyncio.Runner() as runner:
        load = ClosedLoop(url, workload, connections)
        try:
            runner.run(load.open())
            runner.run(load.run(WARM_UP))
            yield lambda requests: dict(runner.run(load.run(requests)))
        finally:
            load.close()
