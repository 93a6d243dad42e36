"""Another node as a replica: calls multiplexed by id over one persistent channel, and when to connect.

:class:`PeerReplica` is what the rest of the node uses of a peer: the connection's life. Its parts are
modules of their own (``peer_state`` and ``failure_detector``, pure; ``heartbeat``, ``inflight``,
``outbox``, ``attempt``, ``channel``, ``answers``, ``clock_probe``).

A call to a peer not connected starts one connect attempt (calls made meanwhile join it) and waits for it
within its own deadline; after a refusal the next call tries again. A suspect peer fails calls at once while
one probe is out. Calls in flight are bounded in number and bytes: beyond either a call fails at once with
ReplicaOverloaded (a write becomes a hint). A heartbeat asks the failure detector whether the silence convicts
the peer: a convicted peer's connection is replaced; one merely quieter than its pace stays, ``lagging``.
Every reply and pong is an arrival, and so is the peer's ping to this node while no call is in flight, so one
ping a beat serves a pair: the member with the lower URL pings a quiet connection, the other only once the
leader's pings stop coming (kvnode.replica.peer_state). With a clock sampler, a new connection and every
eighth beat measure the peer's clock offset (kvnode.replica.clock_probe). With an SSL context it speaks TLS;
a failed TLS handshake is a refusal ("tls"), as a refused HMAC handshake is. Writes travel as the channel's
protocol version has them (kvnode.replica.channel.protocol). Create it inside the running event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from functools import partial

from kvnode.clocks.offsets import Offset
from kvnode.metrics import CallMeter, RecentLatency
from kvnode.replica import Answered, AwaitableCalls, Forwarder, answer_future
from kvnode.replica.attempt import AttemptFailed, connector
from kvnode.replica.channel import wire
from kvnode.replica.channel.client import ClientChannel
from kvnode.replica.channel.handshake import ClusterAuth, RateLimitedLog
from kvnode.replica.channel.identities import Identities
from kvnode.replica.channel.protocol import FORWARDS, resolve, write_call
from kvnode.replica.clock_probe import ClockProbe, ClockSampler
from kvnode.replica.errors import ReplicaError, ReplicaProtocolError, ReplicaUnavailable
from kvnode.replica.failure_detector import DetectorSettings, FailureDetector
from kvnode.replica.heartbeat import Heartbeat
from kvnode.replica.inflight import CallsInFlight
from kvnode.replica.outbox import Outbox
from kvnode.replica.peer_state import AttemptFailure, PeerLife, PeerState
from kvnode.storage.records import Record

__all__ = ["PeerReplica"]

log = logging.getLogger(__name__)

MAX_CALLS_IN_FLIGHT = 4096
_MIN_BYTES_IN_FLIGHT = 16 * 1024 * 1024


class PeerReplica(AwaitableCalls):
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
        detector: DetectorSettings | None = None,  # the failure detector's (defaults: DetectorSettings())
        own_url: str | None = None,  # this node's: the lower URL of a pair pings for both (None: this end)
        logger: logging.Logger = log,  # where its comings and goings are told (a change's own: nowhere)
    ) -> None:
        self.url = url
        self._log = logger
        self._leads = own_url is None or own_url < url
        clock_call = partial(self._call, wire.Op.CLOCK, b"", b"", "clock")
        self._clock = None
        if clock_sampler is not None:
            sample, wall_us = clock_sampler
            self._clock = ClockProbe(url, (partial(self._clock_measured, sample), wall_us), clock_call)
        self._limits = limits or wire.Limits.for_body(16 * 1024 * 1024)
        self._refusals = RateLimitedLog(logger)
        self._loop = asyncio.get_running_loop()
        self._open_channel = connector(
            self, url, auth, self._limits.max_frame, identities, ssl_context=ssl_context, timeout=timeout
        )
        self._timeout = timeout
        self._speculative_ceiling = timeout if speculative_ceiling is None else speculative_ceiling
        self._latency = RecentLatency(99.0)  # Cassandra's speculative_retry = 99PERCENTILE
        self.meter = CallMeter()  # every call's outcome and duration, counted where it is settled
        self._heartbeat = Heartbeat(timeout, self._beat)
        self._life = PeerLife(
            FailureDetector(detector or DetectorSettings(), first_interval=self._heartbeat.interval)
        )
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
        self.connected = False  # whether _channel is open: an attribute, as a write asks it every time
        self._connecting: asyncio.Task[None] | None = None
        self._attempt_failure = ""  # why the last connect attempt failed, until one succeeds
        self.became_connected = asyncio.Event()

    # --- the Replica interface ----------------------------------------------------------------------

    @property
    def lagging(self) -> bool:
        """Connected, but quieter than its pace explains (phi at least 1): a speculative read asks it last."""
        return self._life.lagging(self._loop.time())

    def read_then(self, key: bytes, answered: Answered[Record | None]) -> None:
        self.call_then(wire.Op.READ, key, b"", "read", answered)  # type: ignore[arg-type]

    def write_then(
        self, key: bytes, record: Record, answered: Answered[int | None], encoded: bytes | None = None
    ) -> None:
        channel = self._channel  # its protocol read here: no property call per write
        op, _, sent = write_call(key, record, 0 if channel is None else channel.protocol, encoded)
        self.call_then(op, key, sent, "write", answered)  # type: ignore[arg-type]

    @property
    def forwarder(self) -> Forwarder | None:
        """Itself while it can forward a write to its datacenter's other owners: its channel open and
        speaking FORWARD (protocol 5), and not lagging; None otherwise."""
        channel = self._channel
        if channel is None or channel.protocol < FORWARDS or self.lagging:
            return None
        return self

    def forward_then(self, key: bytes, request: bytes, answered: Answered[object]) -> None:
        """A FORWARD (kvnode.coordinator.forwarding), counted as "forward"."""
        self.call_then(wire.Op.FORWARD, key, request, "forward", answered)

    def deliver_hint(self, key: bytes, record: Record) -> asyncio.Future[int | None]:
        """A write, counted apart from the coordinator's (op="hint" in kvnode_replica_calls_total)."""
        return self._call(*write_call(key, record, self.protocol), "hint")  # type: ignore[return-value]

    def call(self, op: wire.Op, key: bytes, record: bytes = b"", *, label: str) -> asyncio.Future[object]:
        """Any call of the protocol, counted as ``label`` (op= in kvnode_replica_calls_total: "repair",
        "stream", "scan", ...); it resolves to what the protocol table says its reply answers
        (kvnode.replica.channel.protocol): a FETCH to a Record or None, a WRITE as a write does, BRANCHES,
        SEGMENTS, LIST and SCAN to the reply's payload."""
        return self._call(op, key, record, label)

    async def fetch_membership(self) -> bytes:
        """The membership the peer runs with, encoded (kvnode.cluster.members fetches a newer one)."""
        payload = await self._call(wire.Op.MEMBERSHIP, b"", b"", "membership")
        assert isinstance(payload, bytes)
        return payload

    async def offer_membership(self, encoded: bytes) -> None:
        """Ask the peer to run with a newer membership (kvnode.cluster.members); ReplicaRejected: why not."""
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
        """The connection's state by name: connected, connecting, suspect, idle, down, refused, closed."""
        return self._life.state.value

    @property
    def protocol(self) -> int:
        """The protocol version the channel speaks (kvnode.replica.channel.protocol); 0 while not
        connected."""
        return 0 if self._channel is None else self._channel.protocol

    @property
    def frames_sent(self) -> int:
        """Frames of calls sent to the peer since start (kvnode.replica.outbox)."""
        return self._outbox.frames_sent

    @property
    def calls_sent(self) -> int:
        """Calls sent to the peer since start, in those frames."""
        return self._outbox.calls_sent

    @property
    def phi(self) -> float:
        """While connected, the failure detector's suspicion that the peer is gone; 0 otherwise."""
        return self._life.detector.phi(self._loop.time()) if self._channel is not None else 0.0

    @property
    def timeout(self) -> float:
        """Seconds a call to the peer waits for its answer (a large one more: kvnode.replica.inflight)."""
        return self._timeout

    @property
    def distance(self) -> float:
        """The peer's distance: the shortest of its recent round trips, as its clock measurements took them
        (seconds; 0 before one). The failure detector allows a far peer a longer pause for it."""
        return self._life.detector.distance

    @property
    def node_state(self) -> str:
        """The state of the peer's data, as its last clock measurement said ("" before one)."""
        return "" if self._clock is None else self._clock.node_state

    @property
    def refusal(self) -> str:
        """While refused: what the peer's refusal of the handshake was about ("secret", "membership",
        "protocol", "handshake", "tls"); "" otherwise."""
        return self._life.refusal if self._life.state is PeerState.REFUSED else ""

    @property
    def attempt_failure(self) -> str:
        """While not connected: why the last connect attempt failed, in full (the peer's reason for a
        refusal, and its fix); "" before any attempt failed, and while connected."""
        return "" if self.connected else self._attempt_failure

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
        if self._channel is not None and self._clock is not None:
            with contextlib.suppress(ReplicaError):
                await self._clock.measure()

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
        return answer_future(self._loop, partial(self.call_then, op, key, record, label))

    def call_then(self, op: wire.Op, key: bytes, record: bytes, label: str, then: Answered[object]) -> None:
        """Start a call counted as ``label`` (read, write, hint, forward, ...); ``then`` is told its outcome,
        what the protocol table says its reply answers (``call``'s, without a Future)."""
        calls = self._calls
        if self._channel is None:
            action = self._life.call()
            if action.connects:
                self._start_attempt()
            if action.fails:
                calls.refuse(label, self._refusal_error(), then)
                return
        call_id = calls.start(op, label, wire.CALL_HEADER_BYTES + len(key) + len(record), then)
        if call_id is None:
            calls.refuse(label, calls.overloaded(), then)
            return
        self._outbox.put(call_id, wire.encode_call(call_id, op, key, record))

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

    async def _connect(self) -> None:
        try:
            channel = await self._open_channel()
        except AttemptFailed as failed:
            self._attempt_failed(failed)
            return
        finally:
            self._connecting = None
        if not self._life.connected(now=self._loop.time()):  # closed meanwhile
            channel.transport.close()
            return
        self._channel, self.connected = channel, True
        self._attempt_failure = ""
        self._heartbeat.start()
        self.became_connected.set()
        self._outbox.attach(channel)
        if self._clock is not None:
            self._clock.measure()
        self._log.info("replica channel to %s connected", self.url)

    def _attempt_failed(self, failed: AttemptFailed) -> None:
        if failed.failure is AttemptFailure.DENIED:
            self._refusals.warning("replica channel to %s refused: %s", self.url, failed.reason)
        elif failed.failure is AttemptFailure.NO_ANSWER and self._life.state is not PeerState.SUSPECT:
            self._log.warning("replica %s is suspect: no answer within %gs", self.url, self._timeout)
        self._attempt_failure = failed.reason
        self._life.attempt_failed(failed.failure, now=self._loop.time(), refusal=failed.refusal)
        self._disconnect(ReplicaUnavailable(f"{self.url} is unreachable: {failed.reason}"))

    def _beat(self) -> None:
        """Ping a quiet connection; replace one the failure detector convicts."""
        channel = self._channel
        if channel is None:
            return
        now, life = self._loop.time(), self._life
        if life.tick(now=now) is PeerState.SUSPECT:
            quiet, phi = life.detector.quiet_for(now), life.detector.phi(now)
            silent = ReplicaUnavailable(f"{self.url} is silent: no answer for {quiet:.1f}s (phi {phi:.1f})")
            self._give_up(channel, silent)
            self.probe()
            return
        measured = self._clock is not None and self._clock.beat(channel)  # no other ping
        busy, interval = bool(self._calls), self._heartbeat.interval
        if not measured and life.pings(now=now, interval=interval, leads=self._leads, busy=busy):
            channel.ping()
        self._heartbeat.start()

    def _clock_measured(self, sample: Callable[[str, Offset], None], url: str, offset: Offset) -> None:
        """A clock measurement: its offset to ``sample`` (the fence's), its round trip to the failure
        detector (the offset's uncertainty is half of it)."""
        self._life.detector.round_trip(2 * offset.uncertainty_us / 1_000_000)
        sample(url, offset)

    def pinged(self) -> None:
        """The peer pinged this node's server (kvnode.replica.channel.server): PeerLife.pinged says what it
        tells."""
        self._life.pinged(now=self._loop.time(), busy=bool(self._calls))

    # --- what the channel tells (kvnode.replica.channel.ChannelListener) ---------------------------------

    def heard_from(self, channel: ClientChannel) -> None:
        if channel is self._channel:
            self._life.heard(now=self._loop.time())

    def received(self, channel: ClientChannel, frame: bytes) -> None:
        try:
            replies = wire.decode_replies(frame)
        except wire.WireError as error:
            self.drop(channel, ReplicaProtocolError(f"{self.url}: malformed reply frame: {error}"))
            return
        for reply in replies:
            self._resolve(reply)

    def ponged(self, channel: ClientChannel, payload: bytes) -> None:
        if channel is self._channel and self._clock is not None:
            self._clock.ponged(payload)

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
        self._log.log(level, "replica channel to %s dropped: %s", self.url, error)
        self.meter.drops += 1
        self._disconnect(error)

    def _resolve(self, reply: wire.ReplicaReply) -> None:
        calls = self._calls
        if reply.status is wire.Status.FORWARDING:  # the one status answering part of a call (is: cheap)
            part = calls.peek(reply.call_id)
            if part is not None:
                error, answer = resolve(self.url, part.op, reply)
                if error is None:
                    part.answered(None, answer)  # in flight still, for the rest of its answer
                    return
        call = calls.take(reply.call_id)
        if call is None:
            return  # the call already timed out
        self._latency.record(self._loop.time() - call.sent)
        error, answer = resolve(self.url, call.op, reply)
        calls.settle(call, error, answer)

    def _disconnect(self, error: ReplicaError) -> None:
        """Forget the channel and fail every call still waiting on it."""
        self._channel, self.connected = None, False
        self.became_connected.clear()
        self._heartbeat.stop()
        self._outbox.detach()
        if len(self._calls):  # the failure counted before their callbacks run, which may call again
            self._life.failed(self._loop.time())
            self._calls.fail_all(error)
