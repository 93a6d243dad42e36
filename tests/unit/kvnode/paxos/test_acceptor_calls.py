"""kvnode.paxos.acceptor_calls on real storage in this process: each answer's state is stored before the
answer is given (a promise, an acceptance, a commit), a promise carries the key's stored version, a commit
stores its version as a judged replica write and then its state, a version stamped beyond the skew is
refused and moves nothing; a node whose data is not whole answers NOT_READY; the channel's calls carry
the requests and replies encoded, a call that carries the wrong request failing alone; a state is dropped
once the grace period has passed since its last round, never one a round renewed meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock, wall_clock_us
from kvnode.clocks.offsets import ClockOffsets
from kvnode.paxos import acceptor_calls, messages
from kvnode.paxos.acceptor import AcceptorState, decode_state, encode_state
from kvnode.paxos.acceptor_calls import AcceptorCalls, NotAcceptor
from kvnode.paxos.ballot import Ballot
from kvnode.paxos.messages import (
    Accepted,
    Commit,
    Committed,
    Prepare,
    Promise,
    Proposal,
    Propose,
    Refused,
)
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.readiness import NodeState
from kvnode.scheduling import Slice
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record
from kvnode.storage.system_db import SystemDb

SKEW_US = 5_000_000


class Node:
    """An acceptor on real storage, its data whole unless told otherwise."""

    def __init__(self, tmp_path: Path) -> None:
        self.system = SystemDb.open(tmp_path)
        self.storage = Storage.open(tmp_path, fsync=False)
        self.state = NodeState.SERVING
        wall = wall_clock_us()
        self.clock = HybridClock(wall, SKEW_US)
        fence = ClockFence(wall, SKEW_US, ClockOffsets(max_age_s=10.0), peers=0)
        self.acceptor = AcceptorCalls(
            self.system.paxos, self.storage, self.clock, fence, lambda: self.state, fsync=False
        )

    def stored_state(self, key: bytes) -> AcceptorState:
        raw = self.system.paxos.get(key)
        return AcceptorState() if raw is None else decode_state(raw)

    def close(self) -> None:
        self.storage.close()
        self.system.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    opened = Node(tmp_path)
    try:
        yield opened
    finally:
        opened.close()


def test_a_promise_is_stored_before_it_is_given_and_carries_the_stored_version(node: Node) -> None:
    held = Record.put(node.clock.now(), b"held")
    node.storage.apply(b"k", held)
    ballot = Ballot(node.clock.now(), 1)
    promise = node.acceptor.answer(b"k", Prepare(ballot))
    assert promise == Promise(ballot, None, Ballot(0, 0), stored=held)
    assert node.stored_state(b"k") == AcceptorState(promised=ballot)
    lower = Ballot(ballot.micros - 1, 9)
    assert node.acceptor.answer(b"k", Prepare(lower)) == Refused(lower, ballot)
    assert node.stored_state(b"k") == AcceptorState(promised=ballot)  # a refusal moves nothing


def test_an_acceptance_is_stored_before_it_is_given(node: Node) -> None:
    ballot = Ballot(node.clock.now(), 1)
    node.acceptor.answer(b"k", Prepare(ballot))
    proposal = Proposal(ballot, Record.put(ballot.micros, b"v"))
    assert node.acceptor.answer(b"k", Propose(proposal)) == Accepted(ballot)
    assert node.stored_state(b"k").accepted == proposal
    assert node.storage.read(b"k") is None  # accepted, not yet committed


def test_a_commit_stores_its_version_then_its_state(node: Node) -> None:
    ballot = Ballot(node.clock.now(), 1)
    node.acceptor.answer(b"k", Prepare(ballot))
    proposal = Proposal(ballot, Record.put(ballot.micros, b"v"))
    node.acceptor.answer(b"k", Propose(proposal))
    assert node.acceptor.answer(b"k", Commit(proposal)) == Committed(ballot)
    assert node.storage.read(b"k") == proposal.record
    assert node.stored_state(b"k") == AcceptorState(promised=ballot, committed=ballot)
    assert node.clock.current() >= proposal.record.timestamp


def test_a_commit_stamped_beyond_the_skew_is_refused_and_moves_nothing(node: Node) -> None:
    ahead = node.clock.now() + 2 * SKEW_US
    ballot = Ballot(node.clock.now(), 1)
    with pytest.raises(NotAcceptor, match="beyond the maximum clock skew") as refused:
        node.acceptor.answer(b"k", Commit(Proposal(ballot, Record.put(ahead, b"from the future"))))
    assert refused.value.skew
    assert node.storage.read(b"k") is None and node.stored_state(b"k") == AcceptorState()


def test_a_node_whose_data_is_not_whole_takes_no_part(node: Node) -> None:
    node.state = NodeState.REBUILDING
    with pytest.raises(NotAcceptor, match="not whole"):
        node.acceptor.answer(b"k", Prepare(Ballot(node.clock.now(), 1)))
    assert node.stored_state(b"k") == AcceptorState()


def test_the_channel_s_calls_carry_requests_and_replies_encoded(node: Node) -> None:
    answerers = Answerers()
    node.acceptor.register(answerers)
    ballot = Ballot(node.clock.now(), 1)
    prepare = wire.CallRequest(1, wire.Op.PREPARE, b"k", messages.encode(Prepare(ballot)))
    mislabelled = wire.CallRequest(2, wire.Op.COMMIT, b"k", messages.encode(Prepare(ballot)))
    (promised, failed) = wire.decode_replies(b"".join(answerers.answer_frame([prepare, mislabelled])))
    assert promised.status is wire.Status.PAXOS
    assert messages.decode(promised.payload) == Promise(ballot, None, Ballot(0, 0))
    assert (failed.status, failed.payload) == (wire.Status.FAILED, b"a COMMIT call carries a Prepare")
    node.state = NodeState.UNKNOWN
    (not_ready,) = wire.decode_replies(b"".join(answerers.answer_frame([prepare])))
    assert not_ready.status is wire.Status.NOT_READY


async def test_states_are_collected_once_the_grace_period_has_passed_since_their_last_round(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acceptor_calls, "Slice", lambda: Slice(budget_s=0.0))  # a yield after each state
    now = node.clock.now()
    old, recent, renewed = Ballot(now - 3_000_000, 1), Ballot(now, 1), Ballot(now - 3_000_000, 2)
    for key, ballot in ((b"old", old), (b"recent", recent), (b"renewed", renewed)):
        node.system.paxos.put(key, encode_state(AcceptorState(ballot, None, ballot)), sync=False)
    pass_ = asyncio.ensure_future(node.acceptor.collect(grace_us=2_000_000))
    for _ in range(3):
        await asyncio.sleep(0)  # the pass has read the three states, one a turn of the loop
    # A round on "renewed" while the pass runs: its newer promise is judged again, and kept.
    node.acceptor.answer(b"renewed", Prepare(Ballot(node.clock.now(), 3)))
    assert await pass_ == 1
    assert node.system.paxos.get(b"old") is None
    assert node.stored_state(b"recent") == AcceptorState(recent, None, recent)
    assert node.stored_state(b"renewed").promised.micros >= now
