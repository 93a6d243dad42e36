"""Open-loop, constant-rate load with honest latency, as wrk2 measures it.

Request i is due at ``t0 + i / rate`` and is sent then whatever happened to the earlier ones: the
generator never waits for an answer before sending the next request, so a stalled server does not slow
the load down. Each latency is measured from the request's *intended* send time, so time a request
spent queued behind a stall (in the server, or waiting for one of the generator's connections) counts,
which a closed-loop tool such as Locust hides (coordinated omission). A ``cas`` op
(:mod:`loadtest.workload`) is one scheduled request made of two: its read, then on the same connection its
conditional write; its latency runs from its intended time to the write's answer, and the writes' answers
are counted by outcome.

The generator watches itself: its lateness (how long after its intended time each request's bytes were
written to the socket), the requests that found every connection busy, and its own CPU per request.
:meth:`loadtest.rate_result.RateResult.invalid_reasons` turns them into a verdict: a run whose generator, not
the server, decided when requests left is INVALID, and so is a run where more than 1 % of the requests failed.
A failed request is never throughput: the achieved rate counts the requests that succeeded. Requests go
out on lean keep-alive connections (:mod:`loadtest.httpclient`); :mod:`loadtest.workers` spreads a run
over several processes, each sending its :class:`Share` of the schedule.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import itertools
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence

from kvnode.topology.placement import Placement
from loadtest.httpclient import CONNECTION_ERROR, HttpConnection, RequestEncoder, host_port
from loadtest.rate_result import RateResult, Share
from loadtest.workload import CAS_READ_STATUSES, CAS_WRITE, Workload, accepted_statuses, key_name

__all__ = ["REQUEST_TIMEOUT", "run_rate"]

REQUEST_TIMEOUT = 10.0  # seconds; a request still unanswered then counts as a "timeout" error

_WHOLE = Share()  # the whole schedule: one process sends every request
_TICK_S = 0.001  # shortest timer sleep: uvloop runs a delay that rounds to 0 ms at once (a busy loop)
_SWEEP_S = 0.5  # how often requests in flight are checked against the request timeout
# A connection idle this long is closed before it carries a request, as aiohttp's client pool does: a
# node closes idle ones after --idle-timeout-s (60), so the client closes first and never writes into a
# connection the node is closing (that request would fail as "connection"). The idle stack is last in,
# first out, so at a steady rate the connections at its bottom idle the longest.
_POOL_IDLE_S = 15.0
_START_DELAY_S = 0.05  # the schedule starts this long after the connections are up
# time.monotonic is CLOCK_MONOTONIC: one clock for every worker process, and not uvloop's loop.time(),
# which ticks in whole milliseconds.
_clock = time.monotonic


async def run_rate(
    urls: Sequence[str],
    workload: Workload,
    rate: float,
    duration: float,
    connections: int = 64,
    share: Share = _WHOLE,
    start: Callable[[], float] | None = None,
    request_timeout: float = REQUEST_TIMEOUT,
    token_aware: bool = False,
) -> RateResult:
    """Send this share of ``rate * duration`` requests at a constant rate, round-robin over ``urls``; or,
    ``token_aware``, each to its key's first replica by :class:`kvnode.topology.placement.Placement` over
    ``urls``, which must then be the cluster's members, as :mod:`kvnode.client` routes.

    ``connections`` is the share's own, spread over the URLs it sends to (at least one each). Once they
    are open, ``start()`` gives the schedule's start on the ``time.monotonic`` clock (default: now), so
    that worker processes can start together. Bounded in time: it returns at most ``request_timeout``
    seconds after the last send (a request unanswered then counts as a "timeout" error). The CPU figure
    is this process's (for a worker process, the worker's).
    """
    if rate <= 0 or duration <= 0:
        raise ValueError("rate and duration must be positive")
    result = RateResult(workload.op, list(urls), rate, duration)
    total = max(1, round(rate * duration))
    scheduler = _Scheduler(urls, workload, rate, total, share, request_timeout, token_aware)
    # Token-aware, any request may go to any URL: a key's first replica decides.
    targets = list(range(len(urls))) if token_aware else share.urls(len(urls))
    per_url = max(1, connections // len(targets))
    pool = [scheduler.connection(url) for url in targets for _ in range(per_url)]
    # A connection that does not open now is retried by the request that gets it (and fails it if
    # the server is down): a down server is a result to report, not a reason to stop.
    await asyncio.gather(*(scheduler.connect(connection) for connection in pool))
    # The cyclic collector stays off during the run: the hot path makes no reference cycles (refcounting
    # frees everything), and a collection, which walks every object, would be a pause in the schedule.
    gc.collect()
    gc.disable()
    try:
        await scheduler.run(start() if start else _clock() + _START_DELAY_S)
    finally:
        gc.enable()
        for connection in pool:
            connection.close()
    scheduler.report(result)
    result.connections = len(pool)
    return result


def _first_replica_keys(urls: Sequence[str], keys: int) -> dict[str, list[str]]:
    """The workload's keys by their first replica among ``urls``."""
    placement = Placement(urls)
    by_url: dict[str, list[str]] = {url: [] for url in urls}
    for index in range(keys):
        key = key_name(index)
        by_url[placement.order(key.encode())[0]].append(key)
    return by_url


def _cpu_seconds() -> float:
    # CLOCK_PROCESS_CPUTIME_ID, user + system, in nanoseconds: os.times counts whole 10 ms clock ticks,
    # so a short run's CPU could read as zero.
    return time.process_time()


class _Scheduler:
    """Sends a share's requests when they are due and accounts for every outcome.

    A timer wakes the scheduler when the next request is due, at most once a millisecond (uvloop's
    timer resolution), and every request due by then leaves: on an idle connection to its URL, or into
    that URL's backlog (a connection wait) until an answer frees one. At high rates requests thus leave
    in millisecond batches, as wrk2's do. Sending each on its own the moment it came due, between ticks,
    kept lateness lower but woke the server once per request, which on this machine's virtual CPUs cost
    more than the request itself (selfbench against the hello-world app at 10,000/s: 40-45 µs of
    generator CPU per request, against 26-32 µs in batches, lateness p99 1-2 ms either way).
    This is the generator's hot path, so latencies are counted in dicts of whole microseconds and go
    into HdrHistograms once, at the end.
    """

    def __init__(
        self,
        urls: Sequence[str],
        workload: Workload,
        rate: float,
        total: int,
        share: Share,
        timeout: float,
        token_aware: bool,
    ) -> None:
        self.urls = urls
        self.timeout = timeout
        self.keys_ending: list[int] | None = None  # token-aware: cumulative count of keys per URL
        if token_aware:
            # Drawing a URL by its share of the keys, then a key among those it holds first, is drawing a
            # key uniformly and sending it to its first replica, with the placement computed before the run.
            keys = _first_replica_keys(urls, workload.keys)
            self.encoders = [RequestEncoder(workload, url, keys[url]) for url in urls]
            self.keys_ending = list(itertools.accumulate(len(keys[url]) for url in urls))
        else:
            self.encoders = [RequestEncoder(workload, url) for url in urls]
        self.url_rng = random.Random(workload.seed)
        mixed = workload.op == "mixed"
        self.accepted = {
            method: frozenset(str(status) for status in accepted_statuses(method, mixed))
            for method in ("GET", "PUT", "DELETE", CAS_WRITE)
        }
        self.cas = workload.op == "cas"
        self.cas_read_goes_on = frozenset(str(status) for status in CAS_READ_STATUSES)
        self.outcomes: Counter[str] = Counter()  # the cas writes' answers
        self.rate = rate
        self.total = total
        self.next_index = share.index  # of the whole schedule; this share sends every share.workers-th
        self.step = share.workers
        self.t0 = 0.0
        self.idle: list[list[HttpConnection]] = [[] for _ in urls]
        self.backlog: list[deque[float]] = [deque() for _ in urls]
        self.outstanding = 0  # requests handed to a connection (connecting or in flight), not finished
        self.in_flight: set[HttpConnection] = set()
        self.latency_us: dict[int, int] = {}
        self.lateness_us: dict[int, int] = {}
        self.sent = 0
        self.finished = 0
        self.errors: Counter[str] = Counter()
        self.connection_waits = 0
        self.elapsed = 0.0
        self.cpu = 0.0
        self.done: asyncio.Future[None] | None = None
        self.sweeper: asyncio.TimerHandle | None = None
        self.connecting: set[asyncio.Task[None]] = set()

    def connection(self, url: int) -> HttpConnection:
        connection = HttpConnection(*host_port(self.urls[url]), url, self._finished)
        connection.reads_etag = self.cas
        self.idle[url].append(connection)
        return connection

    async def run(self, t0: float) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        self.t0 = t0
        cpu_before = _cpu_seconds()  # the run's own cost: not connecting, not waiting for the start
        loop.call_at(loop.time() + max(0.0, t0 - _clock()), self._tick)
        self.sweeper = loop.call_later(_SWEEP_S, self._sweep)
        # Every request ends within the timeout of its send (the sweep sees to it); this bound only
        # guards against a bug leaving one unaccounted for.
        bound = t0 - _clock() + self.total / self.rate + 2 * self.timeout + _SWEEP_S
        try:
            async with asyncio.timeout(bound):
                await self.done
        except TimeoutError:
            raise RuntimeError(
                f"the run had {self.outstanding} requests unaccounted for at its bound"
            ) from None
        finally:
            if self.sweeper is not None:
                self.sweeper.cancel()
        self.elapsed = _clock() - t0
        self.cpu = _cpu_seconds() - cpu_before

    def report(self, result: RateResult) -> None:
        """Put what was counted into ``result``."""
        result.elapsed_s = self.elapsed
        result.cpu_s = self.cpu
        result.sent = self.sent
        result.requests = self.finished
        result.errors = self.errors
        result.outcomes = self.outcomes
        result.connection_waits = self.connection_waits
        for histogram, counts in ((result.latency, self.latency_us), (result.lateness, self.lateness_us)):
            highest = histogram.hdr.highest_trackable_value
            for micros, count in counts.items():
                histogram.hdr.record_value(min(max(micros, 1), highest), count)

    def _tick(self) -> None:
        self._send_due(_clock())
        if self.next_index < self.total:
            delay = self.t0 + self.next_index / self.rate - _clock()
            asyncio.get_running_loop().call_later(max(delay, _TICK_S), self._tick)
        else:
            self._check_done()

    def _send_due(self, now: float) -> None:
        while self.next_index < self.total:
            intended = self.t0 + self.next_index / self.rate
            if intended > now:
                return
            if self.keys_ending is None:
                url = self.next_index % len(self.urls)
            else:
                url = bisect.bisect_right(self.keys_ending, self.url_rng.randrange(self.keys_ending[-1]))
            self.next_index += self.step
            idle = self.idle[url]
            if idle:
                connection = idle.pop()
                if now - max(connection.sent_at, self.t0) > _POOL_IDLE_S:
                    connection.close()  # _transmit opens it again
                self._send(connection, intended)
            else:
                self.backlog[url].append(intended)
                self.connection_waits += 1

    def _send(self, connection: HttpConnection, intended: float) -> None:
        self.outstanding += 1
        encoder = self.encoders[connection.target]
        if self.cas:
            payload, connection.key = encoder.cas_read()
            connection.method = "GET"
        else:
            payload, connection.method = encoder.next()
        connection.intended = intended
        self._transmit(connection, payload)

    def _transmit(self, connection: HttpConnection, payload: bytes) -> None:
        if connection.connected:
            self._write(connection, payload)
        else:  # the server closed it since: reconnect first, keeping the task until it is done
            task = asyncio.get_running_loop().create_task(self._connect_and_write(connection, payload))
            self.connecting.add(task)
            task.add_done_callback(self.connecting.discard)

    def _write(self, connection: HttpConnection, payload: bytes) -> None:
        now = connection.sent_at = _clock()
        if connection.method != CAS_WRITE:  # a scheduled request leaving (a cas write follows one)
            micros = int((now - connection.intended) * 1e6)
            self.lateness_us[micros] = self.lateness_us.get(micros, 0) + 1
            self.sent += 1
        self.in_flight.add(connection)
        connection.send(payload)

    async def connect(self, connection: HttpConnection) -> bool:
        """Open a connection within the request timeout; False if the server could not be reached."""
        try:
            async with asyncio.timeout(self.timeout):
                await connection.connect()
        except (OSError, TimeoutError):
            return False
        return True

    async def _connect_and_write(self, connection: HttpConnection, payload: bytes) -> None:
        if await self.connect(connection):
            self._write(connection, payload)
            return
        self.finished += 1
        self._count_error(connection.method, CONNECTION_ERROR)
        self._release(connection)

    def _finished(self, connection: HttpConnection, outcome: str) -> None:
        """HttpConnection's on_done: an answer ("200", "504") or a failure ("timeout", "connection")."""
        now = _clock()
        self.in_flight.discard(connection)
        method = connection.method
        if self.cas:
            if method == "GET" and outcome in self.cas_read_goes_on:  # read: the op's write follows
                connection.method = CAS_WRITE
                etag = connection.etag if outcome == "200" else b""
                self._transmit(connection, self.encoders[connection.target].cas_write(connection.key, etag))
                return
            if method == CAS_WRITE:
                self.outcomes[outcome] += 1
        if outcome != CONNECTION_ERROR:  # an answer, or a timeout: it took at least this long
            micros = int((now - connection.intended) * 1e6)
            self.latency_us[micros] = self.latency_us.get(micros, 0) + 1
        if outcome not in self.accepted[method]:
            self._count_error(method, outcome)
        self.finished += 1
        self._release(connection)

    def _count_error(self, method: str, outcome: str) -> None:
        """A request that failed, by its status or failure; a cas op's read's marked as the read's."""
        self.errors[f"read {outcome}" if self.cas and method == "GET" else outcome] += 1

    def _release(self, connection: HttpConnection) -> None:
        self.outstanding -= 1
        backlog = self.backlog[connection.target]
        if backlog:  # already late: it leaves now
            self._send(connection, backlog.popleft())
        else:
            self.idle[connection.target].append(connection)
        if self.next_index >= self.total:
            self._check_done()

    def _check_done(self) -> None:
        if self.next_index >= self.total and not self.outstanding and self.done and not self.done.done():
            self.done.set_result(None)

    def _sweep(self) -> None:
        now = _clock()
        for connection in list(self.in_flight):
            if now - connection.sent_at > self.timeout:
                connection.time_out()
        self.sweeper = asyncio.get_running_loop().call_later(_SWEEP_S, self._sweep)
