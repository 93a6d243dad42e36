"""This node as a Paxos acceptor: the replica calls PREPARE, PROPOSE and COMMIT answered from each key's
durable state (kvnode.storage.system_db's ``paxos/``), registered with the channel's server end
(kvnode.replica.channel.answerers) when the node is wired; the node's own rounds ask it directly
(:meth:`AcceptorCalls.answer`).

Each answer follows the pure acceptor (kvnode.paxos.acceptor): the next state is stored before the
answer leaves, so a promise or an acceptance that anyone heard of survives a ``kill -9``, and one lost
in a crash before it was stored was heard of by nobody. A promise carries the key's stored version, read
after the promise is stored. A commit stores its version as any replica write is stored (judged by the
clock fence: a version stamped beyond the maximum skew is refused, REFUSED, and its state not moved),
then the state. While this node's data is not whole (it rebuilds: its promises went with its disk) it
answers NOT_READY, a failed acceptor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock
from kvnode.paxos import messages
from kvnode.paxos.acceptor import BALLOT_LIFETIME_US, AcceptorState, decode_state, encode_state
from kvnode.paxos.messages import Commit, Committed, Prepare, Promise, Propose, Reply, Request
from kvnode.replica.apply import apply_record
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answer, Answerers, Unanswerable
from kvnode.replica.readiness import NodeState
from kvnode.scheduling import Slice, Tasks
from kvnode.storage.keyspace import Storage, StorageError
from kvnode.storage.system_db import PaxosStates

__all__ = ["CALLS", "AcceptorCalls", "NotAcceptor"]

log = logging.getLogger(__name__)

_NOT_READY: Answer = (wire.Status.NOT_READY, b"")
# The replica call that carries each request of a round.
CALLS: dict[type[Prepare] | type[Propose] | type[Commit], wire.Op] = {
    Prepare: wire.Op.PREPARE,
    Propose: wire.Op.PROPOSE,
    Commit: wire.Op.COMMIT,
}


class NotAcceptor(Exception):
    """This node cannot take part in a round now: its data is not whole, or the commit's version is
    stamped beyond the maximum skew; the message says which."""

    def __init__(self, reason: str, *, skew: bool = False) -> None:
        super().__init__(reason)
        self.skew = skew


@dataclass(slots=True)
class AcceptorCalls:
    """Answers a round's requests for one key at a time from ``states``; ``fsync`` stores each state
    synced to the disk, as the node's writes are (``--fsync``)."""

    states: PaxosStates
    storage: Storage
    clock: HybridClock
    fence: ClockFence
    node_state: Callable[[], NodeState]
    fsync: bool
    tasks: Tasks = field(default_factory=lambda: Tasks("paxos states"))
    collected: int = 0  # states dropped since start, their grace period past

    def start(self, interval_s: float, grace_s: float) -> None:
        """Drop the states whose grace period has passed, every ``interval_s``; call inside the loop."""
        self.tasks.spawn(self._collecting(interval_s, int(grace_s * 1_000_000)), "collect")

    async def stop(self) -> None:
        await self.tasks.stop()

    async def _collecting(self, interval_s: float, grace_us: int) -> None:
        while True:
            await self.tasks.sleep(interval_s)
            try:
                self.collected += await self.collect(grace_us)
            except StorageError as failure:
                log.warning("Paxos states not collected this time: %s", failure)

    async def collect(self, grace_us: int) -> int:
        """One pass: the states whose every ballot is older than the grace period, dropped; how many."""
        before = self.clock.current() - grace_us
        share, old = Slice(), []
        for key, raw in self.states.items():
            if decode_state(raw).expired(before):
                old.append(key)
            await share.pause()
        # Judged again with no await before the drop: a round may have stored a newer state meanwhile.
        gone = [key for key in old if self.state(key).expired(before)]
        self.states.drop(gone)
        return len(gone)

    def register(self, answerers: Answerers) -> None:
        for op in (wire.Op.PREPARE, wire.Op.PROPOSE, wire.Op.COMMIT):
            answerers.register(op, self._answer_call)

    def state(self, key: bytes) -> AcceptorState:
        """The key's state as stored (``AcceptorState()`` when none is); ``admin locate`` shows it."""
        raw = self.states.get(key)
        return AcceptorState() if raw is None else decode_state(raw)

    def answer(self, key: bytes, request: Request) -> Reply:
        """The reply to ``request`` on ``key``, its state stored first; raises NotAcceptor, and the
        store's StorageError."""
        if self.node_state() is not NodeState.SERVING:
            raise NotAcceptor("its data is not whole yet (it rebuilds): its promises may be lost")
        state = self.state(key)
        oldest = self.clock.current() - BALLOT_LIFETIME_US
        if isinstance(request, Prepare):
            after, reply = state.prepare(request.ballot, oldest)
            self._store(key, state, after)
            if isinstance(reply, Promise):
                reply = reply._replace(stored=self.storage.read(key))
            return reply
        if isinstance(request, Propose):
            after, answer = state.propose(request.proposal, oldest)
            self._store(key, state, after)
            return answer
        return self._commit(key, state, request)

    def _commit(self, key: bytes, state: AcceptorState, commit: Commit) -> Committed:
        record = commit.proposal.record
        refused, _ = apply_record(self.storage.apply, self.fence, key, record)
        if refused:
            raise NotAcceptor(refused, skew=True)
        self.clock.observe(record.timestamp)  # a version received moves this node's clock past it
        self._store(key, state, state.commit(commit.proposal.ballot))
        return Committed(commit.proposal.ballot)

    def _store(self, key: bytes, before: AcceptorState, after: AcceptorState) -> None:
        if after != before:
            self.states.put(key, encode_state(after), sync=self.fsync)

    def _answer_call(self, call: wire.CallRequest) -> Answer:
        request = messages.decode(call.record)
        if not isinstance(request, Prepare | Propose | Commit) or CALLS[type(request)] is not call.op:
            raise Unanswerable(f"a {call.op.name} call carries a {type(request).__name__}")
        try:
            reply = self.answer(call.key, request)
        except NotAcceptor as refusal:
            if refusal.skew:
                return wire.Status.REFUSED, str(refusal).encode()
            return _NOT_READY
        return wire.Status.PAXOS, messages.encode(reply)
