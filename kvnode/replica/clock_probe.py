"""Measuring a peer's clock over its replica channel: a CLOCK call's round trip gives the peer's clock
offset (kvnode.clocks.offsets) for the clock fence, and its answer says the state of the peer's data.
The peer replica makes one on each new connection and every few heartbeats, off the request path."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import cast

from kvnode.clocks.offsets import Offset, measure

__all__ = ["BEATS_PER_MEASUREMENT", "ClockProbe", "ClockSampler"]

# Every second timeout (2 s by default), not at every beat: an offset moves slowly, a measurement counts
# for 10 s (kvnode.clocks.fence), so five of them, and an idle cluster's clock calls grow with the square
# of its members (docs/replica-channel.md).
BEATS_PER_MEASUREMENT = 8

# Where a peer's clock measurements go: (peer URL, offset), and the wall clock they are taken with.
ClockSampler = tuple[Callable[[str, Offset], None], Callable[[], int]]


class ClockProbe:
    """One peer's clock measurements, handed to the sampler; ``node_state`` is what its last CLOCK
    answer said of its data ("" before one)."""

    __slots__ = ("_beats", "_sample", "_url", "_wall_us", "node_state")

    def __init__(self, url: str, sampler: ClockSampler) -> None:
        self._url = url
        self._sample, self._wall_us = sampler
        self.node_state = ""
        self._beats = 0

    def beat(self, call: Callable[[], asyncio.Future[object]]) -> bool:
        """A heartbeat: measure the clock at every BEATS_PER_MEASUREMENT-th; whether it did (the call's
        answer is then the beat's sign of life: no ping is needed beside it)."""
        self._beats += 1
        if self._beats % BEATS_PER_MEASUREMENT:
            return False
        self.measure(call)
        return True

    def measure(self, call: Callable[[], asyncio.Future[object]]) -> asyncio.Future[object]:
        """Make the CLOCK call (``call`` starts it) and sample its answer when it comes; a failed call
        is no measurement."""
        future = call()
        future.add_done_callback(partial(self._measured, self._wall_us()))
        return future

    def _measured(self, sent_us: int, future: asyncio.Future[object]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        remote_us, self.node_state = cast(tuple[int, str], future.result())
        self._sample(self._url, measure(sent_us=sent_us, remote_us=remote_us, received_us=self._wall_us()))
