"""Another node as a replica: calls multiplexed by id over one persistent channel, and when to connect.

The channel's life (contract, "Peers"):

- **idle**: no connection. A call starts one connect attempt at once (calls made meanwhile join it) and
  waits for it within its own deadline; there is no back-off window, so a restarted peer is served by
  the very next request that needs it. A refused attempt fails the calls waiting on it; the next call
  tries again.
- **connected**: calls are sent; the calls of one loop tick leave together, small ones in frames of about
  ``wire.FRAME_TARGET`` bytes, a large one (a big value) in a frame of its own after a frame of small
  ones, so a big value holds small calls up no longer than one frame. While the transport's write buffer
  is full, calls wait in the outbox. A heartbeat pings a quiet connection; one silent for a whole timeout
  is replaced.
- **suspect**: the peer did not answer (a connect timed out, or the heartbeat found the connection
  silent). Calls fail at once while one probe (a connect attempt) is outstanding; its first answer
  restores the peer, a refusal makes it idle again.

Calls in flight (waiting in the outbox or sent and unanswered) are bounded in number and bytes: beyond
either bound a new call fails at once with ReplicaOverloaded (a write becomes a hint).

Create it inside the running event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import urllib.parse

from kvnode.metrics import CallMeter, RecentLatency
from kvnode.records import CorruptRecord, Record, decode, encode
from kvnode.replica import wire
from kvnode.replica.auth import ClusterAuth, RateLimitedLog
from kvnode.replica.channel import ClientChannel
from kvnode.replica.errors import (
    ReplicaError,
    ReplicaOverloaded,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
    ReplicaTimeout,
    ReplicaUnavailable,
    outcome,
)
from kvnode.replica.websocket import WebSocketError

__all__ = ["PeerReplica"]

log = logging.getLogger(__name__)

MAX_CALLS_IN_FLIGHT = 4096
_MIN_BYTES_IN_FLIGHT = 16 * 1024 * 1024
# A quiet connection is pinged at every beat, several beats per timeout, so a healthy one is heard from
# well within a timeout. With one beat per half timeout, timer jitter alone dropped idle channels.
_BEATS_PER_TIMEOUT = 4
# A call in flight: its future, op, label (read, write, hint), bytes, and when it was sent (loop time).
_InFlight = tuple[asyncio.Future[object], wire.Op, str, int, float]


class PeerReplica:
    def __init__(
        self,
        url: str,
        timeout: float,
        *,
        speculative_ceiling: float | None = None,
        auth: ClusterAuth | None = None,
        limits: wire.Limits | None = None,
    ) -> None:
        self.url = url
        self._auth = auth
        self._limits = limits or wire.Limits.for_body(16 * 1024 * 1024)
        self.max_calls_in_flight = MAX_CALLS_IN_FLIGHT
        # Room for a few of the largest calls, so one big value never starves the rest.
        self.max_bytes_in_flight = max(_MIN_BYTES_IN_FLIGHT, 4 * self._limits.max_call)
        self._bytes_in_flight = 0
        self._refusals = RateLimitedLog(log)
        self._loop = asyncio.get_running_loop()
        parts = urllib.parse.urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"a peer URL is http://HOST:PORT, got {url!r}")
        self._host, self._port, self._authority = parts.hostname, parts.port, parts.netloc
        self._timeout = timeout
        self._speculative_ceiling = timeout if speculative_ceiling is None else speculative_ceiling
        self._latency = RecentLatency(99.0)  # Cassandra's speculative_retry = 99PERCENTILE
        self.meter = CallMeter()  # every call's outcome and duration, counted where it is settled
        self._channel: ClientChannel | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._suspect = False
        self._closed = False
        self._last_heard = 0.0
        self._heartbeat: asyncio.TimerHandle | None = None
        self.unreachable_since: float | None = None  # loop time of the first failure since it answered
        self.became_connected = asyncio.Event()
        self._next_id = 0
        self._calls: dict[int, _InFlight] = {}
        # Every call has the same timeout, so deadlines arrive in call order: one queue and one timer
        # per peer replace a timer per call. Entries of calls already answered are skipped.
        self._deadlines: collections.deque[tuple[float, int]] = collections.deque()
        self._sweep_timer: asyncio.TimerHandle | None = None
        # Encoded calls not yet sent, by call id in call order: small ones, and large ones (own frames).
        self._small: dict[int, bytes] = {}
        self._large: dict[int, bytes] = {}
        self._flush_scheduled = False

    # --- the Replica interface ----------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._channel is not None

    def read(self, key: bytes) -> asyncio.Future[Record | None]:
        return self._call(wire.Op.READ, key, b"", "read")  # type: ignore[return-value]

    def write(self, key: bytes, record: Record) -> asyncio.Future[int | None]:
        return self._call(wire.Op.WRITE, key, encode(record), "write")  # type: ignore[return-value]

    def deliver_hint(self, key: bytes, record: Record) -> asyncio.Future[int | None]:
        """A write, counted apart from the coordinator's (op="hint" in kvnode_replica_calls_total)."""
        return self._call(wire.Op.WRITE, key, encode(record), "hint")  # type: ignore[return-value]

    # --- for operators and the hint delivery ----------------------------------------------------------

    @property
    def state(self) -> str:
        if self._channel is not None:
            return "connected"
        if self._suspect:
            return "suspect"
        return "connecting" if self._connecting is not None else "idle"

    def speculative_delay(self) -> float:
        """How long a speculative read waits for this peer before asking one more replica: the p99 of
        its recent replies, at most the ceiling (and the ceiling until it has answered at all)."""
        recent = self._latency.value_s(self._loop.time())
        return self._speculative_ceiling if recent is None else min(recent, self._speculative_ceiling)

    def down_for(self) -> float:
        """Seconds since the peer last failed with no answer in between (0 while it answers)."""
        since = self.unreachable_since
        return 0.0 if since is None else self._loop.time() - since

    @property
    def connect_attempt(self) -> asyncio.Task[None] | None:
        """The connect attempt under way, if any (the operator's view of the cluster waits for it)."""
        return self._connecting

    def probe(self) -> None:
        """Start a connect attempt unless connected or one is under way."""
        if self._channel is None and self._connecting is None and not self._closed:
            self._connecting = self._loop.create_task(self._connect())

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        if self._channel is not None:
            self._channel.transport.close()
        self._disconnect(ReplicaUnavailable(f"{self.url}: transport closed"))

    # --- calls ----------------------------------------------------------------------------------------

    def _call(self, op: wire.Op, key: bytes, record: bytes, label: str) -> asyncio.Future[object]:
        """Start a call; ``label`` names it in the call counts (read, write, hint)."""
        loop = self._loop
        future: asyncio.Future[object] = loop.create_future()
        if self._channel is None:
            if self._closed:
                return self._refuse(future, label, ReplicaUnavailable(f"{self.url}: transport closed"))
            self.probe()
            if self._suspect:
                return self._refuse(future, label, ReplicaUnavailable(f"{self.url} is not answering"))
        self._next_id = call_id = (self._next_id + 1) & 0xFFFFFFFF
        message = wire.encode_call(call_id, op, key, record)
        size = len(message)
        if self._calls and (
            len(self._calls) >= self.max_calls_in_flight
            or self._bytes_in_flight + size > self.max_bytes_in_flight
        ):
            overloaded = (
                f"{self.url}: {len(self._calls)} calls, {self._bytes_in_flight} bytes already in flight"
            )
            return self._refuse(future, label, ReplicaOverloaded(overloaded))
        now = loop.time()
        self._calls[call_id] = (future, op, label, size, now)
        self._bytes_in_flight += size
        self._deadlines.append((now + self._timeout, call_id))
        if self._sweep_timer is None:
            self._sweep_timer = loop.call_at(self._deadlines[0][0], self._sweep)
        (self._large if size > wire.LARGE_CALL else self._small)[call_id] = message
        if self._channel is not None and not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _refuse(
        self, future: asyncio.Future[object], label: str, error: ReplicaError
    ) -> asyncio.Future[object]:
        """Fail a call that was never sent."""
        future.set_exception(error)
        self.meter.ended(label, outcome(error), 0.0)
        return future

    def _settle(self, entry: _InFlight, error: BaseException | None, answer: object = None) -> None:
        """End a sent call with its answer or ``error``, and count it."""
        future, _, label, _, sent = entry
        if future.cancelled():
            self.meter.ended(label, "cancelled", self._loop.time() - sent)
            return
        if future.done():
            return
        self.meter.ended(label, outcome(error), self._loop.time() - sent)
        if error is None:
            future.set_result(answer)
        else:
            future.set_exception(error)

    def _flush(self) -> None:
        """Send what the outbox holds, until the transport's buffer is full: a frame of small calls, then
        one large call, and again."""
        self._flush_scheduled = False
        channel, small, large = self._channel, self._small, self._large
        if channel is None:
            return
        limit = self._limits.max_calls
        while (small or large) and not channel.paused:
            if small:
                frame, size = [], 0
                for message in small.values():
                    frame.append(message)
                    size += len(message)
                    if size >= wire.FRAME_TARGET or len(frame) == limit:
                        break
                for call_id in list(itertools.islice(small, len(frame))):
                    del small[call_id]
                channel.send(b"".join(frame))
            if large and not channel.paused:
                call_id = next(iter(large))
                channel.send(large.pop(call_id))

    def writable(self, channel: ClientChannel) -> None:
        """The transport's write buffer drained below its low-water mark: send what waits."""
        if channel is self._channel:
            self._flush()

    def _forget(self, call_id: int) -> _InFlight | None:
        """Take a call out of flight (answered or timed out); its entry, or None if gone."""
        entry = self._calls.pop(call_id, None)
        if entry is None:
            return None
        self._bytes_in_flight -= entry[3]
        self._small.pop(call_id, None)
        self._large.pop(call_id, None)
        return entry

    def _sweep(self) -> None:
        """Fail the calls whose deadline has passed, then wait for the next deadline."""
        self._sweep_timer = None
        now = self._loop.time()
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            entry = self._forget(deadlines.popleft()[1])
            if entry is None:
                continue  # answered in time
            if not entry[0].done():
                self._mark_unreachable()
            self._settle(entry, ReplicaTimeout(f"{self.url} did not answer within {self._timeout:g}s"))
        if deadlines:
            self._sweep_timer = self._loop.call_at(deadlines[0][0], self._sweep)

    # --- the connection ---------------------------------------------------------------------------------

    async def _connect(self) -> None:
        channel: ClientChannel | None = None
        try:
            async with asyncio.timeout(self._timeout):
                _, channel = await self._loop.create_connection(
                    lambda: ClientChannel(self, self._authority, self._auth, self._limits.max_frame),
                    self._host,
                    self._port,
                )
                await channel.upgraded
        except TimeoutError:
            # Nothing answered: a frozen or unreachable host. A frozen peer accepts TCP but never answers
            # the upgrade, so abort the half-open connection.
            self._attempt_failed(channel, suspect=True, reason="no answer")
            return
        except WebSocketError as error:
            self._refusals.warning("replica channel to %s refused: %s", self.url, error)
            self._attempt_failed(channel, suspect=False, reason=str(error))
            return
        except OSError as error:
            self._attempt_failed(channel, suspect=False, reason=str(error) or type(error).__name__)
            return
        except asyncio.CancelledError:
            if channel is not None:
                channel.transport.abort()
            raise
        finally:
            self._connecting = None
        if self._closed:
            channel.transport.close()
            return
        self._channel, self._suspect, self.unreachable_since = channel, False, None
        self._last_heard = self._loop.time()
        self._heartbeat = self._loop.call_later(self._timeout / _BEATS_PER_TIMEOUT, self._beat)
        self.became_connected.set()
        self._flush()
        log.info("replica channel to %s connected", self.url)

    def _attempt_failed(self, channel: ClientChannel | None, *, suspect: bool, reason: str) -> None:
        if channel is not None:
            channel.transport.abort()
        self._mark_unreachable()
        if suspect and not self._suspect:
            log.warning("replica %s is suspect: no answer within %gs", self.url, self._timeout)
        self._suspect = suspect
        self._disconnect(ReplicaUnavailable(f"{self.url} is unreachable: {reason}"))

    def _beat(self) -> None:
        """Ping a quiet connection; replace one that stayed silent for a whole timeout."""
        channel = self._channel
        if channel is None:
            return
        quiet = self._loop.time() - self._last_heard
        if quiet >= self._timeout:
            self._suspect = True
            self.drop(channel, ReplicaUnavailable(f"{self.url} is silent: no answer for {quiet:.1f}s"))
            self.probe()
            return
        interval = self._timeout / _BEATS_PER_TIMEOUT
        if quiet >= interval / 2:
            channel.ping()
        self._heartbeat = self._loop.call_later(interval, self._beat)

    def heard_from(self, channel: ClientChannel) -> None:
        """Bytes arrived on ``channel``: the peer is alive (replies and pongs alike)."""
        if channel is self._channel:
            self._last_heard = self._loop.time()

    def received(self, channel: ClientChannel, frame: bytes) -> None:
        self.unreachable_since = None
        try:
            replies = wire.decode_replies(frame)
        except wire.WireError as error:
            self.drop(channel, ReplicaProtocolError(f"{self.url}: malformed reply frame: {error}"))
            return
        for reply in replies:
            self._resolve(reply)

    def _resolve(self, reply: wire.ReplicaReply) -> None:
        entry = self._forget(reply.call_id)
        if entry is None:
            return  # the call already timed out
        self._latency.record(self._loop.time() - entry[4])
        try:
            answer = _answer_of(entry[1], reply)
        except CorruptRecord as error:
            self._settle(entry, ReplicaProtocolError(f"{self.url}: malformed record in reply: {error}"))
        except wire.WireError as error:
            self._settle(entry, ReplicaProtocolError(f"{self.url}: {error}"))
        except ReplicaRejected as error:
            self._settle(entry, type(error)(f"{self.url}: {error}"))
        else:
            self._settle(entry, None, answer)

    def drop(self, channel: ClientChannel, error: ReplicaError, level: int = logging.WARNING) -> None:
        """Give up a channel: fail its calls, close it; the next call connects again."""
        channel.transport.abort()
        if self._channel is not channel:
            return
        log.log(level, "replica channel to %s dropped: %s", self.url, error)
        self._disconnect(error)

    def _disconnect(self, error: ReplicaError) -> None:
        """Forget the channel and fail every call still waiting on it."""
        self._channel = None
        self.became_connected.clear()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        self._small.clear()
        self._large.clear()
        self._bytes_in_flight = 0
        calls, self._calls = self._calls, {}
        self._deadlines.clear()
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        if calls:
            self._mark_unreachable()
        for entry in calls.values():
            self._settle(entry, error)

    def _mark_unreachable(self) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = self._loop.time()


def _answer_of(op: wire.Op, reply: wire.ReplicaReply) -> object:
    """The value a call resolves to, from its reply; raises for a failed or mismatched reply."""
    status = reply.status
    if status is wire.Status.FAILED:
        raise ReplicaRejected(reply.payload.decode("utf-8", "replace"))
    if status is wire.Status.REFUSED:
        raise ReplicaSkewRefused(reply.payload.decode("utf-8", "replace"))
    if op is wire.Op.READ:
        if status is wire.Status.FOUND:
            return decode(reply.payload)
        if status is wire.Status.ABSENT:
            return None
    elif status is wire.Status.STORED:
        return None
    elif status is wire.Status.NEWER:
        return wire.decode_timestamp(reply.payload)
    raise wire.WireError(f"reply {status.name} does not answer a {op.name}")
