"""Another node as a replica: calls multiplexed by id over one persistent channel, and when to connect.

:class:`PeerReplica` is what the rest of the node uses of a peer. It composes the parts that each do one
job: the peer's connection state (:mod:`~kvnode.replica.peer_state`, pure: which event leads where), the
calls in flight (:mod:`~kvnode.replica.inflight`: ids, deadlines, bounds), the outbox
(:mod:`~kvnode.replica.outbox`: framing), and the channel (:mod:`~kvnode.replica.channel`: bytes). What
is left here is the connection's life: connect attempts, the heartbeat, and turning replies into answers.

A call to a peer not connected starts one connect attempt at once (calls made meanwhile join it) and
waits for it within its own deadline; after a refusal the next call tries again at once, so a restarted
peer is served by the very next request. A suspect peer (no answer) fails calls at once while one probe
is out. Calls in flight are bounded in number and bytes: beyond either bound a new call fails at once
with ReplicaOverloaded (a write becomes a hint). A heartbeat pings a quiet connection; one silent for a
whole timeout is replaced. With a clock sampler, every beat (and every new connection) also makes one
CLOCK call, whose round trip measures the peer's clock offset (kvnode.clocks.offsets), off the request path.
With an SSL context the connection speaks TLS, verifying the peer against the cluster's CA
(kvnode.access.tls); a TLS handshake that fails is a refusal ("tls"), as a refused HMAC handshake is.

Create it inside the running event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import urllib.parse
from collections.abc import Callable
from functools import partial
from typing import cast

from kvnode.clocks.offsets import Offset, measure
from kvnode.metrics import CallMeter, RecentLatency
from kvnode.replica import wire
from kvnode.replica.auth import ClusterAuth, RateLimitedLog
from kvnode.replica.channel import ClientChannel, HandshakeRefused
from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaNotReady,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
    ReplicaUnavailable,
)
from kvnode.replica.identities import Identities
from kvnode.replica.inflight import CallsInFlight
from kvnode.replica.outbox import Outbox
from kvnode.replica.peer_state import AttemptFailure, PeerLife, PeerState
from kvnode.replica.websocket import HandshakeError, WebSocketError
from kvnode.storage.keyspace import DISK_FULL
from kvnode.storage.records import CorruptRecord, Record, decode, encode

__all__ = ["PeerReplica"]

log = logging.getLogger(__name__)

MAX_CALLS_IN_FLIGHT = 4096
_MIN_BYTES_IN_FLIGHT = 16 * 1024 * 1024
# A quiet connection is pinged several times per timeout, so that a healthy one is heard from well within
# a timeout even when timers fire late (docs/replica-channel.md).
_BEATS_PER_TIMEOUT = 4

# Where a peer's clock measurements go: (peer URL, offset), and the wall clock they are taken with.
ClockSampler = tuple[Callable[[str, Offset], None], Callable[[], int]]


class PeerReplica:
    def __init__(
        self,
        url: str,
        timeout: float,
        *,
        speculative_ceiling: float | None = None,
        auth: ClusterAuth | None = None,
        limits: wire.Limits | None = None,
        clock_sampler: ClockSampler | None = None,
        ssl_context: ssl.SSLContext | None = None,  # TLS (kvnode.access.tls.client_context)
        identities: Identities | None = None,
    ) -> None:
        self.url = url
        self._ssl = ssl_context
        self._identities = identities
        self.node_state = ""  # the state of the peer's data, as its last CLOCK answer said ("" before one)
        self._clock_sampler = clock_sampler
        self._auth = auth
        self._limits = limits or wire.Limits.for_body(16 * 1024 * 1024)
        self._refusals = RateLimitedLog(log)
        self._loop = asyncio.get_running_loop()
        parts = urllib.parse.urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"a peer URL is http://HOST:PORT or https://HOST:PORT, got {url!r}")
        self._host, self._port, self._authority = parts.hostname, parts.port, parts.netloc
        self._timeout = timeout
        self._speculative_ceiling = timeout if speculative_ceiling is None else speculative_ceiling
        self._latency = RecentLatency(99.0)  # Cassandra's speculative_retry = 99PERCENTILE
        self.meter = CallMeter()  # every call's outcome and duration, counted where it is settled
        self._life = PeerLife()
        self._calls = CallsInFlight(
            url,
            timeout,
            max_calls=MAX_CALLS_IN_FLIGHT,
            # Room for a few of the largest calls, so one big value never starves the rest.
            max_bytes=max(_MIN_BYTES_IN_FLIGHT, 4 * self._limits.max_call),
            meter=self.meter,
            on_timeout=self._timed_out,
        )
        self._outbox = Outbox(self._limits.max_calls)
        self._channel: ClientChannel | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._last_heard = 0.0
        self._heartbeat: asyncio.TimerHandle | None = None
        self.became_connected = asyncio.Event()

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

    def repair(self, op: wire.Op, key: bytes, record: bytes = b"") -> asyncio.Future[object]:
        """One of anti-entropy's calls (kvnode.healing.anti_entropy), counted apart (op="repair"): a FETCH
        resolves to a Record or None, a WRITE as a write does, BRANCHES, SEGMENTS, LIST and a scan's SCAN
        (kvnode.coordinator.scan) to the reply's payload."""
        return self._call(op, key, record, "repair")

    async def fetch_membership(self) -> bytes:
        """The membership the peer runs with, encoded (kvnode.cluster.members fetches a newer one)."""
        payload = await self._call(wire.Op.MEMBERSHIP, b"", b"", "membership")
        assert isinstance(payload, bytes)
        return payload

    async def offer_membership(self, encoded: bytes) -> None:
        """Ask the peer to run with a newer membership (kvnode.replace); ReplicaRejected says why not."""
        await self._call(wire.Op.ADOPT, b"", encoded, "membership")

    async def reach(self, wait_s: float) -> bool:
        """Whether the channel is open or opens within ``wait_s`` (a connect attempt started if need be)."""
        if self.connected:
            return True
        self.probe()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self.became_connected.wait()
        return self.connected

    # --- for operators and the hint delivery ----------------------------------------------------------

    @property
    def state(self) -> str:
        """The connection's state by name (kvnode.replica.peer_state): connected, connecting, suspect,
        idle, down, refused, closed."""
        return self._life.state.value

    @property
    def refusal(self) -> str:
        """While refused: what the peer's refusal of the handshake was about ("secret", "membership",
        "handshake", "tls"); "" otherwise."""
        return self._life.refusal if self._life.state is PeerState.REFUSED else ""

    def speculative_delay(self) -> float:
        """How long a speculative read waits for this peer before asking one more replica: the p99 of
        its recent replies, at most the ceiling (and the ceiling until it has answered at all)."""
        recent = self._latency.value_s(self._loop.time())
        return self._speculative_ceiling if recent is None else min(recent, self._speculative_ceiling)

    def down_for(self) -> float:
        """Seconds since the peer last failed with no answer in between (0 while it answers)."""
        return self._life.down_for(self._loop.time())

    @property
    def connect_attempt(self) -> asyncio.Task[None] | None:
        """The connect attempt under way, if any (the operator's view of the cluster waits for it)."""
        return self._connecting

    async def measure_clock(self) -> None:
        """Connect if need be (one attempt) and measure the peer's clock once; failures are no measurement."""
        if self._channel is None:
            self.probe()
            if self._connecting is not None:
                await asyncio.wait([self._connecting], timeout=self._timeout)
        if self._channel is not None and self._clock_sampler is not None:
            with contextlib.suppress(ReplicaError):
                await self._measure_clock(self._clock_sampler)

    def probe(self) -> None:
        """Start a connect attempt unless connected or one is under way."""
        if self._life.probe():
            self._start_attempt()

    async def close(self) -> None:
        self._life.close()
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
        calls = self._calls
        if self._channel is None:
            action = self._life.call()
            if action.connects:
                self._start_attempt()
            if action.fails:
                return calls.refuse(label, self._refusal_error())
        started = calls.start(op, label, wire.call_size(key, record))
        if started is None:
            return calls.refuse(label, calls.overloaded())
        call_id, future = started
        self._outbox.put(call_id, wire.encode_call(call_id, op, key, record))
        return future

    def _measure_clock(self, sampler: ClockSampler) -> asyncio.Future[object]:
        _, wall_us = sampler
        future = self._call(wire.Op.CLOCK, b"", b"", "clock")
        future.add_done_callback(partial(self._clock_measured, sampler, wall_us()))
        return future

    def _clock_measured(self, sampler: ClockSampler, sent_us: int, future: asyncio.Future[object]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        sample, wall_us = sampler
        remote_us, self.node_state = cast(tuple[int, str], future.result())
        sample(self.url, measure(sent_us=sent_us, remote_us=remote_us, received_us=wall_us()))

    def _refusal_error(self) -> ReplicaUnavailable:
        if self._life.state is PeerState.CLOSED:
            return ReplicaUnavailable(f"{self.url}: transport closed")
        return ReplicaUnavailable(f"{self.url} is not answering")

    def _timed_out(self, call_id: int) -> None:
        """A call's deadline passed unanswered: it leaves unsent, and the peer is failing."""
        self._outbox.discard(call_id)
        self._life.failed(self._loop.time())

    # --- the connection ---------------------------------------------------------------------------------

    def _start_attempt(self) -> None:
        self._connecting = self._loop.create_task(self._connect())

    def _new_channel(self) -> ClientChannel:
        return ClientChannel(
            self, self.url, self._authority, self._auth, self._limits.max_frame, self._identities
        )

    async def _connect(self) -> None:
        channel: ClientChannel | None = None
        try:
            async with asyncio.timeout(self._timeout):
                _, channel = await self._loop.create_connection(
                    self._new_channel,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None,
                )
                await channel.upgraded
        except TimeoutError:
            # Nothing answered: a frozen or unreachable host. A frozen peer accepts TCP but never answers
            # the upgrade, so abort the half-open connection.
            self._attempt_failed(channel, AttemptFailure.NO_ANSWER, "no answer")
            return
        except HandshakeError as error:
            self._refusals.warning("replica channel to %s refused: %s", self.url, error)
            cause = error.cause if isinstance(error, HandshakeRefused) else "handshake"
            self._attempt_failed(channel, AttemptFailure.DENIED, str(error), refusal=cause)
            return
        except WebSocketError as error:  # the connection broke before the upgrade was answered
            self._attempt_failed(channel, AttemptFailure.UNREACHABLE, str(error))
            return
        except ssl.SSLError as error:  # a certificate the CA did not sign, on either side
            reason = f"TLS: {error.reason or error}"
            self._refusals.warning("replica channel to %s refused: %s", self.url, reason)
            self._attempt_failed(channel, AttemptFailure.DENIED, reason, refusal="tls")
            return
        except OSError as error:
            self._attempt_failed(channel, AttemptFailure.UNREACHABLE, str(error) or type(error).__name__)
            return
        except asyncio.CancelledError:
            if channel is not None:
                channel.transport.abort()
            raise
        finally:
            self._connecting = None
        if not self._life.connected():  # closed meanwhile
            channel.transport.close()
            return
        self._channel = channel
        self._last_heard = self._loop.time()
        self._heartbeat = self._loop.call_later(self._timeout / _BEATS_PER_TIMEOUT, self._beat)
        self.became_connected.set()
        self._outbox.attach(channel)
        if self._clock_sampler is not None:
            self._measure_clock(self._clock_sampler)
        log.info("replica channel to %s connected", self.url)

    def _attempt_failed(
        self, channel: ClientChannel | None, failure: AttemptFailure, reason: str, *, refusal: str = ""
    ) -> None:
        if channel is not None:
            channel.transport.abort()
        if failure is AttemptFailure.NO_ANSWER and self._life.state is not PeerState.SUSPECT:
            log.warning("replica %s is suspect: no answer within %gs", self.url, self._timeout)
        self._life.attempt_failed(failure, now=self._loop.time(), refusal=refusal)
        self._disconnect(ReplicaUnavailable(f"{self.url} is unreachable: {reason}"))

    def _beat(self) -> None:
        """Ping a quiet connection; replace one that stayed silent for a whole timeout."""
        channel = self._channel
        if channel is None:
            return
        quiet = self._loop.time() - self._last_heard
        if quiet >= self._timeout:
            self._life.silent(now=self._loop.time())
            self._give_up(channel, ReplicaUnavailable(f"{self.url} is silent: no answer for {quiet:.1f}s"))
            self.probe()
            return
        interval = self._timeout / _BEATS_PER_TIMEOUT
        if self._clock_sampler is not None:
            self._measure_clock(self._clock_sampler)
        if quiet >= interval / 2:
            channel.ping()
        self._heartbeat = self._loop.call_later(interval, self._beat)

    # --- what the channel tells (kvnode.replica.channel.ChannelListener) ---------------------------------

    def heard_from(self, channel: ClientChannel) -> None:
        if channel is self._channel:
            self._last_heard = self._loop.time()

    def received(self, channel: ClientChannel, frame: bytes) -> None:
        self._life.answered()
        try:
            replies = wire.decode_replies(frame)
        except wire.WireError as error:
            self.drop(channel, ReplicaProtocolError(f"{self.url}: malformed reply frame: {error}"))
            return
        for reply in replies:
            self._resolve(reply)

    def writable(self, channel: ClientChannel) -> None:
        if channel is self._channel:
            self._outbox.flush()

    def drop(self, channel: ClientChannel, error: ReplicaError, level: int = logging.WARNING) -> None:
        """Give up a channel: fail its calls, close it; the next call connects again."""
        if channel is self._channel:
            self._life.lost(now=self._loop.time())
        self._give_up(channel, error, level)

    def _give_up(self, channel: ClientChannel, error: ReplicaError, level: int = logging.WARNING) -> None:
        channel.transport.abort()
        if self._channel is not channel:
            return
        log.log(level, "replica channel to %s dropped: %s", self.url, error)
        self._disconnect(error)

    def _resolve(self, reply: wire.ReplicaReply) -> None:
        calls = self._calls
        call = calls.take(reply.call_id)
        if call is None:
            return  # the call already timed out
        self._latency.record(self._loop.time() - call.sent)
        try:
            answer = _answer_of(call.op, reply)
        except CorruptRecord as error:
            calls.settle(call, ReplicaProtocolError(f"{self.url}: malformed record in reply: {error}"))
        except wire.WireError as error:
            calls.settle(call, ReplicaProtocolError(f"{self.url}: {error}"))
        except ReplicaRejected as error:
            calls.settle(call, type(error)(f"{self.url}: {error}"))
        else:
            calls.settle(call, None, answer)

    def _disconnect(self, error: ReplicaError) -> None:
        """Forget the channel and fail every call still waiting on it."""
        self._channel = None
        self.became_connected.clear()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        self._outbox.detach()
        if self._calls.fail_all(error):
            self._life.failed(self._loop.time())


_PAYLOAD_ANSWERS = {
    wire.Op.BRANCHES: wire.Status.HASHES,
    wire.Op.SEGMENTS: wire.Status.HASHES,
    wire.Op.LIST: wire.Status.LISTING,
    wire.Op.MEMBERSHIP: wire.Status.MEMBERSHIP,
    wire.Op.SCAN: wire.Status.RECORDS,
}


def _answer_of(op: wire.Op, reply: wire.ReplicaReply) -> object:
    """The value a call resolves to, from its reply; raises for a failed or mismatched reply."""
    status = reply.status
    if status is wire.Status.FAILED:
        reason = reply.payload.decode("utf-8", "replace")
        raise (ReplicaDiskFull if reason.startswith(DISK_FULL) else ReplicaRejected)(reason)
    if status is wire.Status.REFUSED:
        raise ReplicaSkewRefused(reply.payload.decode("utf-8", "replace"))
    if status is wire.Status.NOT_READY:
        raise ReplicaNotReady("its data is not whole yet (it rebuilds)")
    if op is wire.Op.READ or op is wire.Op.FETCH:
        if status is wire.Status.FOUND:
            return decode(reply.payload)
        if status is wire.Status.ABSENT:
            return None
    elif op is wire.Op.CLOCK:
        if status is wire.Status.CLOCK:
            return wire.decode_clock(reply.payload)
    elif op in _PAYLOAD_ANSWERS:
        if status is _PAYLOAD_ANSWERS[op]:
            return reply.payload
    elif status is wire.Status.STORED:
        return None
    elif status is wire.Status.NEWER:
        return wire.decode_timestamp(reply.payload)
    raise wire.WireError(f"reply {status.name} does not answer a {op.name}")
