"""Measuring a peer's clock over its replica channel: a round trip gives the peer's clock offset
(kvnode.clocks.offsets) for the clock fence, and its answer says the state of the peer's data.

The peer replica makes a CLOCK call on each new connection (and when the fence asks), and measures again
every few heartbeats, off the request path. On a channel that speaks protocol 3 that beat's ping is a
*clock ping*: it carries this node's wall clock, and the peer's server answers with a pong that carries it
back followed by a CLOCK reply's payload, so measuring costs no more than the ping the beat might send
anyway, as CockroachDB's heartbeats carry the clock. Older channels make a CLOCK call instead.

The other end, a peer measuring this node's clock, is answered by :class:`ClockAnswers`: its CLOCK calls,
and its clock pings' pongs (the channel's server end asks it for the clock they carry)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Protocol, cast

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.offsets import Offset, measure
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answer, Answerers
from kvnode.replica.channel.protocol import CLOCK_PING_SIZE, CLOCK_PINGS
from kvnode.replica.readiness import NodeState

__all__ = ["BEATS_PER_MEASUREMENT", "ClockAnswers", "ClockProbe", "ClockSampler", "Pinger"]

# Every second timeout (2 s by default), not at every beat: an offset moves slowly, a measurement counts
# for 10 s (kvnode.clocks.fence), so five of them, and an idle cluster's measurements grow with the square
# of its members (docs/replica-channel.md).
BEATS_PER_MEASUREMENT = 8

# Where a peer's clock measurements go: (peer URL, offset), and the wall clock they are taken with.
ClockSampler = tuple[Callable[[str, Offset], None], Callable[[], int]]


class Pinger(Protocol):
    """A channel as a heartbeat sees it (kvnode.replica.channel.ClientChannel)."""

    protocol: int  # the version it speaks

    def ping(self, payload: bytes = b"") -> None: ...


class ClockProbe:
    """One peer's clock measurements, handed to the sampler; ``call`` starts a CLOCK call to the peer.
    ``node_state`` is what its last measurement said of its data ("" before one)."""

    __slots__ = ("_beats", "_call", "_sample", "_url", "_wall_us", "node_state")

    def __init__(self, url: str, sampler: ClockSampler, call: Callable[[], asyncio.Future[object]]) -> None:
        self._url = url
        self._sample, self._wall_us = sampler
        self._call = call
        self.node_state = ""
        self._beats = 0

    def beat(self, channel: Pinger) -> bool:
        """A heartbeat: measure the clock at every BEATS_PER_MEASUREMENT-th, with a clock ping on
        ``channel`` where it speaks them, else with a CLOCK call; whether it did (its answer is then the
        beat's sign of life: no other ping is needed beside it)."""
        self._beats += 1
        if self._beats % BEATS_PER_MEASUREMENT:
            return False
        if channel.protocol >= CLOCK_PINGS:
            channel.ping(wire.encode_timestamp(self._wall_us()))
        else:
            self.measure()
        return True

    def measure(self) -> asyncio.Future[object]:
        """Make a CLOCK call and sample its answer when it comes; a failed call is no measurement."""
        future = self._call()
        future.add_done_callback(partial(self._measured, self._wall_us()))
        return future

    def ponged(self, payload: bytes) -> None:
        """A pong with a payload came: a clock ping's answer is sampled; anything else is no measurement."""
        try:
            sent_us = wire.decode_timestamp(payload[:CLOCK_PING_SIZE])
            remote_us, node_state = wire.decode_clock(payload[CLOCK_PING_SIZE:])
        except wire.WireError:
            return
        self._took(sent_us, remote_us, node_state)

    def _measured(self, sent_us: int, future: asyncio.Future[object]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        self._took(sent_us, *cast(tuple[int, str], future.result()))

    def _took(self, sent_us: int, remote_us: int, node_state: str) -> None:
        self.node_state = node_state
        self._sample(self._url, measure(sent_us=sent_us, remote_us=remote_us, received_us=self._wall_us()))


class ClockAnswers:
    """This node's answers to a peer measuring its clock: its wall clock, as the fence reads it, and the
    state of its data."""

    __slots__ = ("_fence", "_node_state")

    def __init__(self, fence: ClockFence, node_state: Callable[[], NodeState]) -> None:
        self._fence = fence
        self._node_state = node_state

    def register(self, answerers: Answerers) -> None:
        answerers.register(wire.Op.CLOCK, self.clock)

    def now(self) -> bytes:
        """A CLOCK reply's payload: this node's wall clock now, and the state of its data (a clock ping's
        pong carries it too)."""
        return wire.encode_clock(self._fence.wall_us(), self._node_state())

    def clock(self, call: wire.CallRequest) -> Answer:
        return wire.Status.CLOCK, self.now()
