"""The calls to one peer in flight (waiting in the outbox, or sent and unanswered): their ids and callbacks,
their deadlines, and the bounds on their number and bytes.

A call's deadline is the timeout after it is made, plus the time to carry its bytes when it is large
(:func:`carry_s`: a 16 MiB write cannot cross a loaded machine's replica channel, be parsed and stored
within the default second; docs/limits.md). Calls of at most ``LARGE_CALL_BYTES`` (nearly all) have the
same deadline after they are made, so their deadlines arrive in call order: one queue and one timer per
peer replace a timer per call, and the entries of calls already answered are skipped when their deadline
comes; the few large calls wait in a heap beside it. The timer wakes at most 64 times per timeout, however
many calls. Each call's outcome is counted in the peer's :class:`~kvnode.metrics.CallMeter` where it
ends, then told to its callback there and then.

>>> carry_s(64 * 1024), carry_s(LARGE_CALL_BYTES), carry_s(17 * 1024 * 1024)
(0.0, 0.0, 4.0)

Create it inside the running event loop.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
from collections.abc import Callable
from typing import NamedTuple

from kvnode.metrics import CallMeter
from kvnode.replica import Answered
from kvnode.replica.channel import wire
from kvnode.replica.errors import ReplicaError, ReplicaOverloaded, ReplicaTimeout, outcome

__all__ = ["CARRY_BYTES_PER_S", "LARGE_CALL_BYTES", "CallsInFlight", "InFlightCall", "carry_s"]

_new_tuple = tuple.__new__  # a NamedTuple built without its Python-level __new__: one per call

# A sweep fails the calls past their deadline, then sleeps at least this share of the timeout, so a call
# fails at most 1/64 of its timeout late (16 ms of the default second) and a busy peer sweeps 64 times a
# timeout, not once per call.
_SWEEP_SLACK = 1 / 64
# A call carrying more than LARGE_CALL_BYTES gets a second more per CARRY_BYTES_PER_S beyond them: the
# slowest rate a 16 MiB write was carried at (sent, parsed and stored by the peer, answered) on the test
# machine under load was about 6 MiB/s, so 4 MiB/s leaves a margin (docs/limits.md). Up to a MiB a call
# keeps the timeout alone, as every read and small write does.
LARGE_CALL_BYTES = 1024 * 1024
CARRY_BYTES_PER_S = 4 * 1024 * 1024


def carry_s(size: int, large: int = LARGE_CALL_BYTES, rate: int = CARRY_BYTES_PER_S) -> float:
    """Seconds a call of ``size`` bytes gets beyond the timeout to carry them."""
    return max(0, size - large) / rate if size > large else 0.0


class InFlightCall(NamedTuple):
    answered: Answered[object]
    op: wire.Op
    label: str  # names it in the call counts: read, write, hint
    size: int  # its encoded bytes
    sent: float  # loop time it was made


class CallsInFlight:
    """Calls by id, bounded in number and bytes; a call whose deadline passes fails with ReplicaTimeout,
    and ``on_timeout`` is told its id (the peer did not answer it)."""

    def __init__(
        self,
        url: str,
        timeout: float,
        *,
        max_calls: int,
        max_bytes: int,
        meter: CallMeter,
        on_timeout: Callable[[int], None],
        large: int = LARGE_CALL_BYTES,
        carry_rate: int = CARRY_BYTES_PER_S,
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._large_call = large  # a call of more bytes gets carry_s beyond the timeout
        self._carry_rate = carry_rate
        self.max_calls = max_calls
        self.max_bytes = max_bytes
        self._meter = meter
        self._on_timeout = on_timeout
        self._loop = asyncio.get_running_loop()
        self._calls: dict[int, InFlightCall] = {}
        self._bytes = 0
        self._next_id = 0
        self._deadlines: collections.deque[tuple[float, int]] = collections.deque()  # in call order
        self._large: list[tuple[float, int]] = []  # large calls' deadlines, a heap
        # uvloop answers call_at with a time already past (a sweep re-armed once its callbacks took the
        # loop beyond the next deadline) by a plain Handle, which has no when(): the time is kept here.
        self._sweep_timer: asyncio.Handle | None = None
        self._sweep_at = 0.0

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def bytes(self) -> int:
        return self._bytes

    def start(self, op: wire.Op, label: str, size: int, answered: Answered[object]) -> int | None:
        """Take a call of ``size`` bytes into flight, ``answered`` to be told its outcome: its id, or None
        when it would break a bound (a lone call is always taken, however large, so no call is refused
        forever)."""
        calls = self._calls
        if calls and (len(calls) >= self.max_calls or self._bytes + size > self.max_bytes):
            return None
        self._next_id = call_id = (self._next_id + 1) & 0xFFFFFFFF
        now = self._loop.time()
        calls[call_id] = _new_tuple(InFlightCall, (answered, op, label, size, now))
        self._bytes += size
        deadline = now + self._timeout
        if size > self._large_call:
            deadline += carry_s(size, self._large_call, self._carry_rate)
            heapq.heappush(self._large, (deadline, call_id))
        else:
            self._deadlines.append((deadline, call_id))
        timer = self._sweep_timer
        if timer is None or deadline < self._sweep_at:  # only a call made after a large one can be due first
            if timer is not None:
                timer.cancel()
            self._arm(deadline)
        return call_id

    def overloaded(self) -> ReplicaOverloaded:
        """The error of a call refused for the bounds."""
        calls, size = len(self._calls), self._bytes
        return ReplicaOverloaded(f"{self._url}: {calls} calls, {size} bytes already in flight")

    def refuse(self, label: str, error: ReplicaError, answered: Answered[object]) -> None:
        """A call failed before it was taken into flight: counted, and ``answered`` told at once."""
        self._meter.ended(label, outcome(error), 0.0)
        answered(error, None)

    def peek(self, call_id: int) -> InFlightCall | None:
        """A call still in flight, left there (told part of its answer); None when it is gone."""
        return self._calls.get(call_id)

    def take(self, call_id: int) -> InFlightCall | None:
        """Take a call out of flight (answered); None when it is gone (timed out, or failed)."""
        call = self._calls.pop(call_id, None)
        if call is not None:
            self._bytes -= call.size
        return call

    def settle(self, call: InFlightCall, error: ReplicaError | None, answer: object = None) -> None:
        """End a call taken out of flight with its answer or ``error``: count it, and tell its callback."""
        counted = "ok" if error is None else outcome(error)  # no call for the usual outcome
        self._meter.ended(call.label, counted, self._loop.time() - call.sent)
        call.answered(error, answer)

    def fail_all(self, error: ReplicaError) -> None:
        """Fail every call in flight with ``error`` (the channel is gone)."""
        calls, self._calls = self._calls, {}
        self._bytes = 0
        self._deadlines.clear()
        self._large.clear()
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        for call in calls.values():
            self.settle(call, error)

    def _sweep(self) -> None:
        """Fail the calls whose deadline has passed, then wait for the next deadline."""
        self._sweep_timer = None
        now = self._loop.time()
        deadlines, large, calls = self._deadlines, self._large, self._calls
        while deadlines and deadlines[0][0] <= now:
            call_id = deadlines.popleft()[1]
            if call_id in calls:  # nearly every one was answered in time: no call for those
                self._expire(call_id)
        while large and large[0][0] <= now:
            self._expire(heapq.heappop(large)[1])
        if (deadlines or large) and self._sweep_timer is None:  # a call its callbacks made may have armed it
            # Deadlines are as far apart as the calls: armed at each, the timer would be one per call.
            first = min(queue[0][0] for queue in (deadlines, large) if queue)
            self._arm(max(first, now + self._timeout * _SWEEP_SLACK))

    def _arm(self, when: float) -> None:
        self._sweep_at = when
        self._sweep_timer = self._loop.call_at(when, self._sweep)

    def _expire(self, call_id: int) -> None:
        call = self.take(call_id)
        if call is None:
            return  # answered in time
        self._on_timeout(call_id)
        waited = self._timeout + carry_s(call.size, self._large_call, self._carry_rate)
        self.settle(call, ReplicaTimeout(f"{self._url} did not answer within {waited:g}s"))
