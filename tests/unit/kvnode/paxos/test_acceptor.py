"""kvnode.paxos.acceptor: every transition's rule, the classic traps, the codec, and crash point by crash
point a driver that stores the state before it answers."""

from __future__ import annotations

import pytest

from kvnode.paxos.acceptor import AcceptorState, decode_state, encode_state
from kvnode.paxos.ballot import ZERO_BALLOT, Ballot
from kvnode.paxos.messages import (
    Accepted,
    Commit,
    Committed,
    Prepare,
    Promise,
    Proposal,
    Propose,
    Refused,
    Reply,
    Request,
)
from kvnode.storage.records import CorruptRecord, Record

B1, B2, B3 = Ballot(100, 1), Ballot(200, 2), Ballot(300, 3)
P1 = Proposal(B1, Record.put(100, b"one"))
P2 = Proposal(B2, Record.put(200, b"two"))


def promised(ballot: Ballot, state: AcceptorState | None = None) -> AcceptorState:
    state, answer = (state or AcceptorState()).prepare(ballot, oldest=0)
    assert isinstance(answer, Promise)
    return state


def accepted(proposal: Proposal, state: AcceptorState | None = None) -> AcceptorState:
    state, answer = promised(proposal.ballot, state).propose(proposal, oldest=0)
    assert answer == Accepted(proposal.ballot)
    return state


# --- prepare


def test_a_prepare_above_the_promise_is_promised_with_what_was_accepted_and_committed() -> None:
    state = accepted(P1).commit(Ballot(50, 5))  # a late commit of an older ballot voids nothing newer
    state, answer = state.prepare(B2, oldest=0)
    assert answer == Promise(B2, accepted=P1, committed=Ballot(50, 5), stored=None)
    assert state.promised == B2


def test_a_prepare_below_the_promise_is_refused_naming_the_promise() -> None:
    state = promised(B2)
    assert state.prepare(B1, oldest=0) == (state, Refused(B1, B2))


def test_the_same_prepare_again_is_answered_again_with_the_same_news() -> None:
    state = accepted(P1)
    again, answer = state.prepare(B1, oldest=0)
    assert again == state and answer == Promise(B1, P1, ZERO_BALLOT)


def test_a_prepare_at_or_below_the_most_recent_commit_is_refused() -> None:
    state = accepted(P1).commit(B1)
    assert state.prepare(B1, oldest=0) == (state, Refused(B1, B1))


def test_a_ballot_older_than_the_lifetime_is_refused_naming_the_oldest_taken() -> None:
    assert AcceptorState().prepare(B1, oldest=101) == (AcceptorState(), Refused(B1, Ballot(101, 0)))
    state = promised(B1)
    assert state.propose(P1, oldest=101) == (state, Refused(B1, Ballot(101, 0)))
    assert promised(B3).prepare(B1, oldest=101)[1] == Refused(B1, B3)  # the higher of the two


# --- propose


def test_a_proposal_is_accepted_only_at_the_ballot_promised() -> None:
    assert AcceptorState().propose(P1, oldest=0) == (AcceptorState(), Refused(B1, ZERO_BALLOT))  # no prepare
    state = promised(B1)
    assert state.propose(P2, oldest=0) == (state, Refused(B2, B1))  # a ballot never promised, even above
    later = promised(B2, state)
    assert later.propose(P1, oldest=0) == (later, Refused(B1, B2))  # outbid since
    state, answer = state.propose(P1, oldest=0)
    assert answer == Accepted(B1) and state.accepted == P1


def test_the_same_proposal_again_is_accepted_again() -> None:
    state = accepted(P1)
    assert state.propose(P1, oldest=0) == (state, Accepted(B1))


def test_a_proposal_committed_already_is_refused() -> None:
    state = accepted(P1).commit(B1)
    assert state.propose(P1, oldest=0) == (state, Refused(B1, B1))


# --- commit


def test_a_commit_voids_an_accepted_proposal_at_or_below_it_and_raises_the_promise() -> None:
    state = accepted(P1).commit(B2)
    assert state == AcceptorState(promised=B2, accepted=None, committed=B2)


def test_a_commit_below_a_newer_accepted_proposal_keeps_it() -> None:
    state = accepted(P2).commit(B1)
    assert state == AcceptorState(promised=B2, accepted=P2, committed=B1)


def test_a_late_commit_of_an_older_ballot_lowers_nothing() -> None:
    state = accepted(P2).commit(B2).commit(B1)
    assert state == AcceptorState(promised=B2, accepted=None, committed=B2)


def test_an_old_proposal_proposed_again_after_a_newer_commit_is_refused() -> None:
    # The trap: a proposer still holding B1's promise proposes after the round at B2 committed.
    state = accepted(P2, promised(B1)).commit(B2)
    assert state.propose(P1, oldest=0) == (state, Refused(B1, B2))
    assert state.prepare(B1, oldest=0) == (state, Refused(B1, B2))


# --- collection


def test_a_state_is_collectable_only_as_the_commit_that_reached_everyone_and_once_it_is_old() -> None:
    state = accepted(P1).commit(B1)
    assert state.collectable(B1, oldest=101)
    assert not state.collectable(B1, oldest=100)  # not older than a ballot's lifetime yet
    assert not state.collectable(Ballot(50, 5), oldest=101)  # a later commit may not be everywhere
    assert not promised(B2, state).collectable(B1, oldest=301)  # a promise given since
    assert not accepted(P2, state).collectable(B1, oldest=301)
    assert not accepted(P1).collectable(ZERO_BALLOT, oldest=301)


def test_after_collection_a_late_prepare_and_proposal_from_below_the_commit_are_refused() -> None:
    # The trap the simulation found: a round long lost, its prepare and proposal delayed in the network,
    # revived on an acceptor that forgot its promise, and completed over what was committed since.
    collected = AcceptorState()
    oldest = B2.micros + 1  # collection waited until the commit at B2 was older than the lifetime
    assert collected.prepare(B1, oldest)[1] == Refused(B1, Ballot(oldest, 0))
    assert collected.propose(P1, oldest)[1] == Refused(B1, Ballot(oldest, 0))


# --- the codec


@pytest.mark.parametrize(
    "state",
    [
        AcceptorState(),
        promised(B2),
        accepted(P1),
        accepted(Proposal(B2, Record.put(200, b"v", ttl_us=5, copies=2))).commit(B1),
        accepted(Proposal(B1, Record.delete(90))),
    ],
)
def test_a_state_decodes_as_it_was_encoded(state: AcceptorState) -> None:
    assert decode_state(encode_state(state)) == state


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "needs at least"),
        (encode_state(promised(B1))[:-1], "needs at least"),
        (b"\x02" + encode_state(promised(B1))[1:], "format 2"),
        (encode_state(promised(B1))[:-1] + b"\x04", "unknown flags"),
        (encode_state(promised(B1)) + b"x", "after its fields"),
        (encode_state(AcceptorState(ZERO_BALLOT, None, B1)), "below its commit"),
        (encode_state(accepted(P1))[:-4], "shorter than"),
    ],
)
def test_bytes_the_codec_did_not_make_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode_state(data)


def test_a_corrupt_accepted_record_is_a_corrupt_record() -> None:
    data = encode_state(accepted(P1))
    with pytest.raises(CorruptRecord):
        decode_state(data[: -len(b"one") - 1] + b"\xff")


# --- crash points: a driver stores the next state before it sends the answer


class Node:
    """An acceptor as a node drives it: its durable bytes, and what it sent."""

    def __init__(self) -> None:
        self.disk = b""
        self.sent: list[Reply] = []

    def state(self) -> AcceptorState:
        return decode_state(self.disk) if self.disk else AcceptorState()

    def handle(self, message: Request, crash: str = "") -> None:
        state = self.state()
        answer: Reply
        if isinstance(message, Prepare):
            state, answer = state.prepare(message.ballot, oldest=0)
        elif isinstance(message, Propose):
            state, answer = state.propose(message.proposal, oldest=0)
        else:  # the driver stores the commit's version in the same batch
            state, answer = state.commit(message.proposal.ballot), Committed(message.proposal.ballot)
        if crash == "before stored":
            return  # the process is gone: nothing stored, nothing sent
        self.disk = encode_state(state)
        if crash != "after stored":  # else stored, but the answer never left
            self.sent.append(answer)


def test_a_promise_lost_in_a_crash_before_it_was_stored_was_never_sent_and_binds_nothing() -> None:
    node = Node()
    node.handle(Prepare(B2), crash="before stored")
    assert node.sent == [] and node.state() == AcceptorState()
    node.handle(Prepare(B1))  # a lower ballot may be promised: nobody heard of B2's promise
    assert node.sent == [Promise(B1, None, ZERO_BALLOT)]


def test_a_promise_stored_then_lost_in_a_crash_binds_the_restarted_acceptor() -> None:
    node = Node()
    node.handle(Prepare(B2), crash="after stored")
    assert node.sent == []
    node.handle(Prepare(B1))
    assert node.sent == [Refused(B1, B2)]
    node.handle(Prepare(B2))  # the proposer's retry gets its promise after all
    assert node.sent[-1] == Promise(B2, None, ZERO_BALLOT)


def test_an_acceptance_survives_a_crash_and_the_next_promise_reports_it() -> None:
    node = Node()
    node.handle(Prepare(B1))
    node.handle(Propose(P1), crash="after stored")
    node.handle(Prepare(B2))
    assert node.sent[-1] == Promise(B2, P1, ZERO_BALLOT)


def test_an_acceptance_lost_before_it_was_stored_was_never_made() -> None:
    node = Node()
    node.handle(Prepare(B1))
    node.handle(Propose(P1), crash="before stored")
    node.handle(Prepare(B2))
    assert node.sent[-1] == Promise(B2, None, ZERO_BALLOT)


@pytest.mark.parametrize(
    ("crash", "then"),
    [("before stored", Promise(B2, P1, ZERO_BALLOT)), ("after stored", Promise(B2, None, B1))],
)
def test_a_commit_is_durable_once_stored_and_lost_whole_before(crash: str, then: Promise) -> None:
    node = Node()
    node.handle(Prepare(B1))
    node.handle(Propose(P1))
    node.handle(Commit(P1), crash=crash)
    assert node.sent == [Promise(B1, None, ZERO_BALLOT), Accepted(B1)]  # no acknowledgement either way
    node.handle(Prepare(B2))
    assert node.sent[-1] == then
