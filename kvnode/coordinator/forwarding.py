"""A write crossing to another datacenter once, both ends of its FORWARD call (kvnode.coordinator.forwards
says which owner forwards, and the call's codec).

The coordinator's end is a :class:`ForwardBatch`: one datacenter's owners of a write, each of which the
fan-out starts as a call of its own and which joins the batch instead of being sent; the first to join
sends the FORWARD to the forwarder, and each owner's outcome is told to that owner's call as the forwarder's
replies bring it (one owner's a FORWARDING reply, as it comes in: a slow owner there holds up no quorum
that the others make), so the fan-out counts each owner in its quorum (each datacenter's too) when it would
have counted a write it sent itself, and the coordinator hints each one that failed, exactly as for such a
write: the forwarder keeps no hint, so none is kept twice. An
owner the forwarder did not relay to (no channel open to it there) is written to directly then; so are all
the others when the FORWARD fails as a whole (the forwarder went down, or did not answer within the call's
timeout: the forwarder's own copy fails with that error), so that no write waits for a forwarder longer
than that timeout before it goes to the owners directly.

The forwarder's end is the :class:`Relay`, the FORWARD's deferred answerer
(kvnode.replica.channel.answerers): it stores its own copy, relays the write to each other owner named over
its own channels, and answers each owner's outcome as it comes in (FORWARDING), the last one FORWARDED, which
ends the call; once its budget (what the coordinator's timeout leaves of a round trip: forwards.budget_s)
has passed, the owners still silent are answered as timed out, in the last reply. Create both inside the
running event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial

from kvnode.coordinator.forwards import (
    NOT_RELAYED,
    ForwardRequest,
    Outcome,
    budget_s,
    decode_outcomes,
    decode_request,
    encode_outcomes,
    encode_request,
)
from kvnode.replica import Answered, Forwarder, Replica
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers, Reply
from kvnode.replica.channel.protocol import Part
from kvnode.replica.errors import ReplicaError, ReplicaProtocolError, ReplicaTimeout
from kvnode.replica.inflight import carry_s
from kvnode.storage.records import Record

__all__ = ["ForwardBatch", "Relay"]


class ForwardBatch:
    """``targets``, one datacenter's owners of the write of ``record`` at ``key``, the first of them the
    forwarder: each owner's call joins it (:meth:`join`), and is told its own outcome."""

    __slots__ = ("_forwarder", "_key", "_outcomes", "_record", "_sent", "_targets", "_told")

    def __init__(self, forwarder: Forwarder, targets: Sequence[Replica], key: bytes, record: Record) -> None:
        self._forwarder = forwarder
        self._targets = tuple(targets)
        self._key = key
        self._record = record
        self._told: list[Answered[int | None] | None] = [None] * len(targets)  # until told its outcome
        self._outcomes: list[Outcome | None] = [None] * len(targets)
        self._sent = False

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(replica.url for replica in self._targets)

    def join(self, replica: Replica, answered: Answered[int | None]) -> None:
        """The fan-out starts ``replica``'s write: ``answered`` is told its outcome once the FORWARD's reply
        has it (at once if it came already); the first to join sends the FORWARD."""
        index = self._targets.index(replica)
        self._told[index] = answered
        if not self._sent:
            self._sent = True
            forwarder = self._forwarder
            # A large write's call waits longer, to carry its bytes (kvnode.replica.inflight), as do the
            # forwarder's own calls relaying it: so does the budget.
            timeout = forwarder.timeout + carry_s(len(self._record.value))
            budget = budget_s(timeout, forwarder.distance)
            payload = encode_request(budget, self.urls, self._record)
            forwarder.forward_then(self._key, payload, self._forwarded)
        self._tell(index)

    def _forwarded(self, error: ReplicaError | None, answer: object) -> None:
        """A reply to the FORWARD: some owners' outcomes (a Part: more to come), or the last; when the call
        failed (or a reply does not decode), the forwarder's error for its own copy, if it had no outcome
        yet, and a direct write to every other owner still without one."""
        count, told = len(self._targets), []
        last = not isinstance(answer, Part)
        payload = answer.payload if isinstance(answer, Part) else answer
        if error is None and isinstance(payload, bytes):
            try:
                told = decode_outcomes(payload, count)
            except wire.WireError as malformed:
                error = ReplicaProtocolError(f"{self._forwarder.url}: {malformed}")
        if error is not None:
            told, last = [(0, Outcome(error))], True
        for index, outcome in told:
            self._settle(index, outcome)
        if last:  # an owner the forwarder did not account for is written to directly
            for index in range(count):
                self._settle(index, NOT_RELAYED)

    def _settle(self, index: int, outcome: Outcome) -> None:
        """An owner's outcome, the first it is told (a later one is dropped)."""
        if self._outcomes[index] is None:
            self._outcomes[index] = outcome
            self._tell(index)

    def _tell(self, index: int) -> None:
        """Tell an owner's call its outcome, once both are there (once: its callback is then dropped)."""
        answered, outcome = self._told[index], self._outcomes[index]
        if answered is None or outcome is None:
            return
        self._told[index] = None
        if outcome.relayed:
            answered(outcome.error, outcome.newer)
        else:
            self._targets[index].write_then(self._key, self._record, answered)


class Relay:
    """This node as a forwarder: the FORWARD answerer. ``replica_at(url)`` is the replica a target is
    written through (this node's own storage for its own URL, a peer's channel for a member; None for a
    URL no member has here); ``observe`` moves this node's clock past a record received, as every record
    received does (kvnode.replica.storage_calls)."""

    __slots__ = ("_observe", "_replica_at")

    def __init__(self, replica_at: Callable[[str], Replica | None], observe: Callable[[int], object]) -> None:
        self._replica_at = replica_at
        self._observe = observe

    def register(self, answerers: Answerers) -> None:
        answerers.register_deferred(wire.Op.FORWARD, self.forward)

    def forward(self, call: wire.CallRequest, reply: Reply) -> None:
        """Store and relay a FORWARD's write; ``reply`` is told every owner's outcome. Raises WireError
        (a ValueError: the call fails) for a request that does not decode."""
        request = decode_request(call.record)
        self._observe(request.record.timestamp)
        relaying = _Relaying(request, reply)
        for index, url in enumerate(request.targets):
            replica = self._replica_at(url)
            if replica is None or not replica.connected:
                relaying.settle(index, NOT_RELAYED)
            else:
                replica.write_then(call.key, request.record, partial(relaying.answered, index))
        relaying.wait(asyncio.get_running_loop())


class _Relaying:
    """One FORWARD being relayed: each owner's outcome so far, and its answer once all are in or its budget
    has passed (then it is answered, once, and what comes after is dropped)."""

    __slots__ = ("_missing", "_outcomes", "_reply", "_request", "_timer")

    def __init__(self, request: ForwardRequest, reply: Reply) -> None:
        self._request = request
        self._reply = reply
        self._outcomes: list[Outcome | None] | None = [None] * len(request.targets)  # None once answered
        self._missing = len(request.targets)
        self._timer: asyncio.TimerHandle | None = None

    def answered(self, index: int, error: ReplicaError | None, newer: int | None) -> None:
        self.settle(index, Outcome(error, newer))

    def settle(self, index: int, outcome: Outcome) -> None:
        """An owner's outcome: answered at once, in a FORWARDING reply, or in the last if it is the last."""
        outcomes = self._outcomes
        if outcomes is None or outcomes[index] is not None:
            return
        outcomes[index] = outcome
        self._missing -= 1
        if self._missing:
            self._reply(wire.Status.FORWARDING, encode_outcomes([(index, outcome)]))
        else:
            self._answer([(index, outcome)])

    def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """Answer at the budget's end at the latest (unless every owner has answered already)."""
        if self._outcomes is not None:
            self._timer = loop.call_later(self._request.budget_s, self._expire)

    def _expire(self) -> None:
        outcomes = self._outcomes
        assert outcomes is not None
        budget = self._request.budget_s
        silent = [
            (index, Outcome(ReplicaTimeout(f"{url} did not answer the forwarder within {budget:g}s")))
            for index, url in enumerate(self._request.targets)
            if outcomes[index] is None
        ]
        self._answer(silent)

    def _answer(self, last: list[tuple[int, Outcome]]) -> None:
        """The last reply, with the outcomes not answered yet: the call ends."""
        self._outcomes = None
        if self._timer is not None:
            self._timer.cancel()
        self._reply(wire.Status.FORWARDED, encode_outcomes(last))
