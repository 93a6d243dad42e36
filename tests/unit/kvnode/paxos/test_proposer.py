"""kvnode.paxos.proposer: one round step by step (every phase, contention, duplicates and stale replies),
then a deterministic simulation of concurrent compare-and-set appends against in-memory acceptors over a
faulty network, checked for lost, duplicated and out-of-order appends, and shown to catch a proposer
that ignores the accepted values its promises report."""

from __future__ import annotations

import functools
import heapq
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from kvnode.paxos.acceptor import AcceptorState, decode_state, encode_state
from kvnode.paxos.ballot import ZERO_BALLOT, Ballot, next_ballot, node_tiebreak
from kvnode.paxos.conditions import IfAbsent, IfMatch, etag
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
from kvnode.paxos.proposer import (
    BACKOFF_CAP_S,
    Applied,
    Contended,
    ImpossibleStep,
    Majorities,
    NotApplied,
    Outcome,
    Phase,
    Read,
    Round,
    Send,
    Start,
    Status,
    Unknown,
    Waiting,
    Write,
    backoff_delay,
)
from kvnode.storage.records import Record, newest

OWNERS = ["a", "b", "c"]
B1, B2, B3 = Ballot(100, 1), Ballot(200, 2), Ballot(300, 3)
NONE = ZERO_BALLOT


NEW = Write.put(b"new")


def new_round(write: Write | None = NEW, condition: IfMatch | IfAbsent | None = None) -> Round:
    return Round(OWNERS, Majorities.of(OWNERS), write=write, condition=condition, now_us=1_000)


def promise(
    ballot: Ballot,
    stored: Record | None = None,
    accepted: Proposal | None = None,
    committed: Ballot = NONE,
) -> Promise:
    return Promise(ballot, accepted, committed, stored)


def kinds(sends: list[Send]) -> list[tuple[str, str]]:
    return [(send.to, type(send.message).__name__) for send in sends]


def status_of(round_: Round) -> Status:
    return round_.status  # through a call, so that mypy does not narrow one assertion's status to the next


def phase_of(round_: Round) -> Phase:
    status = round_.status
    assert isinstance(status, Waiting), status
    return status.phase


def answer_all(round_: Round, reply: Reply, owners: Sequence[str] = OWNERS) -> list[Send]:
    """Each owner's reply in turn: the sends of the last that had any."""
    sends: list[Send] = []
    for owner in owners:
        sends = round_.receive(owner, reply) or sends
    return sends


# --- an uncontended round, phase by phase


def test_an_uncontended_write_prepares_proposes_and_commits_then_answers() -> None:
    current = Record.put(50, b"old")
    round_ = new_round(condition=IfMatch(etag(current)))
    assert status_of(round_) == Start(NONE)
    assert kinds(round_.start(B1)) == [("a", "Prepare"), ("b", "Prepare"), ("c", "Prepare")]
    assert round_.receive("a", promise(B1, current)) == []
    proposes = round_.receive("b", promise(B1, current))
    written = Record.put(B1.micros, b"new")  # at the ballot's clock reading: above the version read
    assert proposes == [Send(owner, Propose(Proposal(B1, written))) for owner in OWNERS]
    assert round_.receive("c", promise(B1, current)) == []  # a late promise: the round has moved on
    assert round_.receive("a", Accepted(B1)) == []
    commits = round_.receive("c", Accepted(B1))
    assert commits == [Send(owner, Commit(Proposal(B1, written))) for owner in OWNERS]
    assert round_.receive("b", Committed(B1)) == []
    assert phase_of(round_) is Phase.COMMIT  # never an answer before a quorum stored the commit
    round_.receive("a", Committed(B1))
    assert status_of(round_) == Applied(written)
    assert round_.attempts == 1 and round_.proposed == [written]


def test_the_new_version_is_stamped_above_every_version_the_round_saw() -> None:
    ahead = Record.put(B1.micros + 40, b"ahead")  # a version stamped by a clock ahead of this one
    voided = Proposal(Ballot(90, 9), Record.put(B1.micros + 70, b"voided"))  # seen, though not current
    round_ = new_round()
    round_.start(B1)
    round_.receive("a", promise(B1, ahead, accepted=voided, committed=Ballot(95, 9)))
    (propose, *_) = round_.receive("b", promise(B1, ahead, committed=Ballot(95, 9)))
    assert isinstance(propose.message, Propose)
    assert propose.message.proposal.record.timestamp == B1.micros + 71


def test_a_condition_that_fails_answers_not_applied_with_the_current_version_and_writes_nothing() -> None:
    current = Record.put(50, b"other")
    round_ = new_round(condition=IfMatch(etag(Record.put(40, b"mine"))))
    round_.start(B1)
    round_.receive("a", promise(B1, current))
    assert round_.receive("b", promise(B1, current)) == []
    assert status_of(round_) == NotApplied(current)
    assert round_.proposed == []


def test_create_once_applies_over_a_tombstone_and_an_expired_version_but_not_a_live_one() -> None:
    for current, applies in [
        (None, True),
        (Record.delete(50), True),
        (Record.put(50, b"v", ttl_us=100), True),  # expired at now_us=1_000
        (Record.put(50, b"v", ttl_us=10_000), False),
    ]:
        round_ = new_round(condition=IfAbsent())
        round_.start(B1)
        answer_all(round_, promise(B1, current), ["a", "b"])
        assert phase_of(round_) is Phase.PROPOSE if applies else status_of(round_) == NotApplied(current)


def test_a_serial_read_answers_the_newest_stored_version_without_proposing() -> None:
    round_ = new_round(write=None)
    round_.start(B1)
    round_.receive("a", promise(B1, Record.put(60, b"newer"), committed=Ballot(60, 1)))
    assert round_.receive("c", promise(B1, Record.put(60, b"newer"), committed=Ballot(60, 1))) == []
    assert status_of(round_) == Read(Record.put(60, b"newer"))


def test_a_write_deletes_and_keeps_its_ttl_from_its_stamp() -> None:
    assert Write.delete().stamped(7) == Record.delete(7)
    assert Write.put(b"v", ttl_us=5).stamped(7) == Record.put(7, b"v", ttl_us=5)


# --- catching up promisers behind the most recent commit


def test_a_promiser_behind_the_most_recent_commit_is_caught_up_before_the_round_goes_on() -> None:
    current, older = Record.put(60, b"committed"), Record.put(40, b"older")
    round_ = new_round(condition=IfMatch(etag(current)))
    round_.start(B1)
    round_.receive("a", promise(B1, current, committed=Ballot(60, 1)))
    catch_up = round_.receive("b", promise(B1, older, committed=Ballot(40, 1)))
    assert catch_up == [Send("b", Commit(Proposal(Ballot(60, 1), current)))]
    status = round_.status
    assert isinstance(status, Waiting)
    assert (status.phase, status.answered, status.awaited) == (Phase.CATCH_UP, frozenset("a"), frozenset("b"))
    assert round_.receive("c", Committed(Ballot(60, 1))) == []  # not asked to catch up
    assert round_.receive("b", Committed(B1)) == []  # not the catch-up's ballot
    proposes = round_.receive("b", Committed(Ballot(60, 1)))
    assert kinds(proposes) == [("a", "Propose"), ("b", "Propose"), ("c", "Propose")]


def test_a_promiser_holding_an_older_version_is_caught_up_though_its_commit_is_current() -> None:
    current = Record.put(60, b"v")
    round_ = new_round(write=None)
    round_.start(B1)
    round_.receive("a", promise(B1, current))
    assert round_.receive("b", promise(B1, None)) == [Send("b", Commit(Proposal(NONE, current)))]
    round_.receive("b", Committed(NONE))
    assert status_of(round_) == Read(current)


def test_nothing_stored_anywhere_needs_no_catch_up() -> None:
    round_ = new_round(write=None)
    round_.start(B1)
    round_.receive("a", promise(B1, None, committed=Ballot(60, 1)))
    assert round_.receive("b", promise(B1, None)) == []
    assert status_of(round_) == Read(None)


def test_when_the_up_to_date_promisers_are_a_quorum_the_others_are_caught_up_on_the_way() -> None:
    # Owners a, b, c, and d gaining the key: a quorum is 2 of a, b, c and d itself.
    current = Record.put(60, b"v")
    round_ = Round(["a", "b", "c", "d"], Majorities.of("abc", "d"), write=None, now_us=1_000)
    round_.start(B1)
    for owner in "abc":
        round_.receive(owner, promise(B1, current if owner != "c" else None))
    assert round_.receive("d", promise(B1, current)) == [Send("c", Commit(Proposal(NONE, current)))]
    assert status_of(round_) == Read(current)


# --- completing what an earlier round left accepted


def test_an_accepted_proposal_newer_than_every_commit_is_completed_first_then_the_round_starts_over() -> None:
    theirs = Proposal(Ballot(90, 9), Record.put(90, b"theirs"))
    round_ = new_round(condition=IfMatch(etag(Record.put(50, b"old"))))
    round_.start(B1)
    round_.receive("a", promise(B1, Record.put(50, b"old"), accepted=theirs))
    completing = round_.receive("b", promise(B1, Record.put(50, b"old")))
    # The trap: a proposer that read "old" from the stores and ignored the accepted value would propose
    # its own version now, and the one possibly chosen (and acknowledged) would be lost.
    assert completing == [Send(owner, Propose(Proposal(B1, theirs.record))) for owner in OWNERS]
    answer_all(round_, Accepted(B1), ["b", "c"])
    assert phase_of(round_) is Phase.COMPLETE_COMMIT
    answer_all(round_, Committed(B1), ["a", "c"])
    assert status_of(round_) == Start(B1)  # a new ballot, and the round reads again
    round_.start(B2)
    answer_all(round_, promise(B2, theirs.record, committed=B1), ["a", "b"])
    assert status_of(round_) == NotApplied(theirs.record)


def test_the_latest_of_several_accepted_proposals_is_the_one_completed() -> None:
    older = Proposal(Ballot(80, 8), Record.put(80, b"older"))
    later = Proposal(Ballot(90, 9), Record.put(85, b"later"))
    round_ = new_round(write=None)
    round_.start(B1)
    round_.receive("a", promise(B1, accepted=later))
    sends = round_.receive("b", promise(B1, accepted=older))
    assert sends[0].message == Propose(Proposal(B1, later.record))


def test_an_accepted_proposal_at_or_below_the_most_recent_commit_is_void_and_never_proposed_again() -> None:
    # The trap: b accepted "stale" at ballot 80 and missed the commit at 90 that a built on. Proposing
    # "stale" again would write an older state over the committed one.
    stale = Proposal(Ballot(80, 8), Record.put(80, b"stale"))
    committed = Record.put(90, b"committed")
    round_ = new_round(write=None)
    round_.start(B1)
    round_.receive("a", promise(B1, committed, committed=Ballot(90, 9)))
    sends = round_.receive("b", promise(B1, Record.put(50, b"old"), accepted=stale, committed=Ballot(50, 5)))
    assert sends == [Send("b", Commit(Proposal(Ballot(90, 9), committed)))]  # caught up instead
    round_.receive("b", Committed(Ballot(90, 9)))
    assert status_of(round_) == Read(committed)


def test_the_unfinished_hook_names_the_proposal_to_complete() -> None:
    round_ = new_round()
    round_.start(B1)
    round_.receive("a", promise(B1, accepted=Proposal(Ballot(90, 9), Record.put(90, b"x"))))
    assert round_.unfinished() == Proposal(Ballot(90, 9), Record.put(90, b"x"))


def test_an_unfinished_proposal_whose_version_is_stored_needs_no_completing() -> None:
    """Committing it would store nothing new (a store keeps the newest version); the catch-up brings the
    version to a quorum. Contending rounds completing one version again and again chased each other until
    their time ran out."""
    stored = Record.put(90, b"x")
    round_ = new_round(write=None)
    round_.start(B2)
    round_.receive("a", promise(B2, stored, accepted=Proposal(B1, stored)))
    sends = round_.receive("b", promise(B2, None, accepted=Proposal(B1, stored)))
    assert kinds(sends) == [("b", "Commit")]  # b caught up with the stored version, not completed
    round_.receive("b", Committed(NONE))  # at the last commit's ballot: none here
    assert status_of(round_) == Read(stored)
    older = new_round(write=None)
    older.start(B2)
    newer = Record.put(95, b"y")  # a version newer than the unfinished one is stored: nothing to complete
    answer_all(older, promise(B2, newer, accepted=Proposal(B1, stored)), ["a", "b"])
    assert status_of(older) == Read(newer)


# --- contention


def test_refusals_end_the_attempt_once_the_others_cannot_be_a_quorum_and_the_next_starts_above() -> None:
    round_ = new_round()
    round_.start(B2)
    round_.receive("a", promise(B2))
    assert round_.receive("b", Refused(B2, B3)) == []
    assert phase_of(round_) is Phase.PREPARE  # a and c may still be a majority
    assert round_.receive("c", Refused(B2, B2)) == []
    assert status_of(round_) == Contended(B3) and round_.contentions == 1  # above the highest named
    assert round_.receive("c", promise(B2)) == []  # the attempt is over
    with pytest.raises(ImpossibleStep, match="not above"):
        round_.start(B2)
    assert kinds(round_.start(Ballot(301, 1)))[0] == ("a", "Prepare")
    assert round_.attempts == 2


def test_a_refusal_not_above_the_ballot_is_no_news() -> None:
    round_ = new_round()
    round_.start(B2)
    round_.receive("a", Refused(B1, B2))  # an earlier attempt's, naming this one
    round_.receive("a", promise(B2))
    sends = round_.receive("b", promise(B2))
    assert phase_of(round_) is Phase.PROPOSE
    assert round_.receive("c", Refused(B2, B1)) == []  # c never promised B2: it cannot accept, no more
    assert phase_of(round_) is Phase.PROPOSE and len(sends) == 3


def test_a_proposal_a_majority_accepted_is_chosen_whoever_refused_it() -> None:
    """A refusal is no news about the other owners: accepts from a majority choose the proposal (it is
    committed and applied), where ending the attempt at the refusal would leave its outcome unknown."""
    round_ = new_round()
    round_.start(B1)
    answer_all(round_, promise(B1), ["a", "b"])
    round_.receive("c", Refused(B1, B3))
    assert phase_of(round_) is Phase.PROPOSE
    assert kinds(answer_all(round_, Accepted(B1), ["a", "b"]))[0] == ("a", "Commit")
    answer_all(round_, Committed(B1), ["a", "b"])
    assert isinstance(round_.status, Applied) and round_.contentions == 0


def test_refusals_do_not_end_a_commit() -> None:
    round_ = new_round()
    round_.start(B1)
    answer_all(round_, promise(B1), ["a", "b"])
    answer_all(round_, Accepted(B1), ["a", "b"])
    round_.receive("c", Refused(B1, B3))  # chosen already: only the commit is left, and it is never refused
    assert phase_of(round_) is Phase.COMMIT


def contended_after_proposing(stored: Record | None = None) -> tuple[Round, Record]:
    """A round whose proposal one owner accepted before the two others refused it for a higher ballot."""
    round_ = new_round(condition=IfAbsent())
    round_.start(B1)
    answer_all(round_, promise(B1, stored), ["a", "b"])
    (mine,) = round_.proposed
    round_.receive("a", Accepted(B1))
    round_.receive("b", Refused(B1, B2))
    round_.receive("c", Refused(B1, B2))
    assert status_of(round_) == Contended(B2)
    round_.start(B3)
    return round_, mine


def test_its_own_proposal_found_unfinished_is_completed_and_applied_without_judging_again() -> None:
    round_, mine = contended_after_proposing()
    round_.receive("a", promise(B3, None, accepted=Proposal(B1, mine)))
    answer_all(round_, promise(B3, None), ["b"])
    answer_all(round_, Accepted(B3), ["a", "b"])
    answer_all(round_, Committed(B3), ["a", "c"])
    assert status_of(round_) == Applied(mine)  # though its condition (absent) no longer holds


def test_its_own_proposal_found_stored_is_applied() -> None:
    round_, mine = contended_after_proposing()
    answer_all(round_, promise(B3, mine, committed=B2), ["a", "b"])
    assert status_of(round_) == Applied(mine)


def test_a_newer_version_than_its_own_proposal_leaves_the_outcome_unknown() -> None:
    round_, mine = contended_after_proposing()
    newer = Record.put(mine.timestamp + 5, b"built on mine, or not")
    answer_all(round_, promise(B3, newer, committed=B2), ["a", "b"])
    status = round_.status
    assert isinstance(status, Unknown) and "newer version" in status.reason


def test_an_older_version_than_its_own_proposal_means_it_was_never_chosen_and_the_round_goes_on() -> None:
    round_, mine = contended_after_proposing()
    sends = answer_all(round_, promise(B3, None), ["b", "c"])
    assert kinds(sends)[0] == ("a", "Propose")
    again = round_.proposed[-1]
    assert round_.proposed == [mine, again] and again.timestamp == B3.micros


# --- duplicates, stale replies, time outs, misuse


def test_duplicate_and_stale_replies_are_ignored() -> None:
    round_ = new_round()
    round_.start(B1)
    round_.receive("a", promise(B1))
    assert round_.receive("a", promise(B1)) == []  # the same owner twice is one promise
    assert round_.receive("a", promise(Ballot(50, 5))) == []  # another attempt's
    assert round_.receive("x", promise(B1)) == []  # not an owner
    assert round_.receive("b", Accepted(B1)) == []  # another phase's
    assert phase_of(round_) is Phase.PREPARE
    round_.receive("b", promise(B1))
    round_.receive("a", Accepted(B1))
    assert round_.receive("a", Accepted(B1)) == [] and phase_of(round_) is Phase.PROPOSE
    round_.receive("c", Accepted(B1))
    answer_all(round_, Committed(B1), ["a", "a"])
    assert phase_of(round_) is Phase.COMMIT
    round_.receive("b", Committed(B1))
    applied = round_.status
    assert isinstance(applied, Applied)
    assert round_.receive("c", Committed(B1)) == [] and status_of(round_) == applied


def test_a_time_out_is_unknown_and_names_what_the_round_waited_for() -> None:
    round_ = new_round()
    round_.start(B1)
    round_.receive("a", promise(B1))
    outcome = round_.time_out()
    assert outcome == Unknown("no quorum in the prepare phase before the timeout (silent: b, c)")
    assert status_of(round_) == outcome and round_.receive("b", promise(B1)) == []
    contended = new_round()
    contended.start(B1)
    answer_all(contended, Refused(B1, B2), ["a", "b"])
    assert "contended by ballot 200." in contended.time_out().reason  # type: ignore[union-attr]
    assert "no attempt" in new_round().time_out().reason  # type: ignore[union-attr]


def test_a_time_out_after_the_outcome_keeps_it() -> None:
    round_ = new_round(write=None)
    round_.start(B1)
    answer_all(round_, promise(B1), ["a", "b"])
    assert round_.time_out() == Read(None)


def test_a_round_cannot_start_while_an_attempt_is_in_flight_or_be_built_wrong() -> None:
    round_ = new_round()
    round_.start(B1)
    with pytest.raises(ImpossibleStep):
        round_.start(B2)
    with pytest.raises(ValueError, match="never answer"):
        Round(["a"], Majorities.of(OWNERS), now_us=0)
    with pytest.raises(ValueError, match="no condition"):
        Round(OWNERS, Majorities.of(OWNERS), condition=IfAbsent(), now_us=0)


def test_majorities_count_each_group_and_ignore_an_empty_one() -> None:
    assert Majorities.of("abc")({"a", "b"})
    assert not Majorities.of("abc")({"a", "x"})
    assert Majorities.of("abcd")({"a", "b", "c"}) and not Majorities.of("abcd")({"a", "b"})
    moving = Majorities.of("abc", gaining="de")
    assert not moving({"a", "b", "d"}) and moving({"a", "b", "d", "e"})


def test_backoff_grows_with_contention_up_to_its_cap_and_never_past_the_time_left() -> None:
    ceilings = [backoff_delay(n, 0.999999, 10.0) for n in range(1, 12)]
    assert ceilings == sorted(ceilings) and ceilings[-1] == pytest.approx(BACKOFF_CAP_S, rel=1e-5)
    assert backoff_delay(3, 0.0, 10.0) == 0.0
    assert backoff_delay(9, 0.9, 0.003) == 0.003
    assert backoff_delay(9, 0.9, -1.0) == 0.0


# --- a deterministic simulation: concurrent compare-and-set appends over a faulty network


@dataclass
class Faults:
    drop: float = 0.0  # a message lost
    duplicate: float = 0.0  # a message delivered twice
    slow: float = 0.0  # a message delayed far longer than the others (reordered)
    crash: float = 0.0  # an acceptor crashes as it handles a message (before or after storing)


FAULTY = Faults(drop=0.05, duplicate=0.1, slow=0.15, crash=0.01)
ROUND_TIMEOUT_US = 300_000
BALLOT_LIFETIME_US = ROUND_TIMEOUT_US  # the acceptors' (no ballot of a live round is older)


def tokens_of(record: Record | None) -> tuple[str, ...]:
    if record is None or record.tombstone or not record.value:
        return ()
    return tuple(record.value.decode().split(","))


@dataclass
class Op:
    kind: str  # "append" or "read"
    invoked: int
    completed: int | None = None  # None: unknown (an append whose outcome is unknown)
    token: str = ""
    seen: tuple[str, ...] = ()  # a read's list, or the list an applied append wrote


@dataclass(order=True)
class Event:
    time: int
    order: int
    action: Callable[[], None] = field(compare=False)


class Acceptor:
    """An owner's acceptor and its store of the key, both durable, driven as the node's driver would:
    the next state stored before the answer is sent, a commit's record and state in one batch."""

    def __init__(self, sim: Simulation, name: str) -> None:
        self.sim, self.name = sim, name
        self.durable = b""  # the stored acceptor state; empty: none (never written, or collected)
        self.stored: Record | None = None
        self.down_until = 0

    def state(self) -> AcceptorState:
        return decode_state(self.durable) if self.durable else AcceptorState()

    def handle(self, message: Request) -> Reply | None:
        """The reply, or None when the acceptor is down or crashes while handling the message."""
        sim = self.sim
        if sim.now < self.down_until:
            return None
        crash = sim.rng.random() < sim.faults.crash
        if crash and sim.rng.random() < 0.5:
            self.crash()  # before storing anything: as if the message never came
            return None
        state, oldest = self.state(), sim.now - BALLOT_LIFETIME_US
        reply: Reply
        if isinstance(message, Prepare):
            state, reply = state.prepare(message.ballot, oldest)
        elif isinstance(message, Propose):
            state, reply = state.propose(message.proposal, oldest)
        else:
            state, reply = state.commit(message.proposal.ballot), Committed(message.proposal.ballot)
            self.stored = newest([self.stored, message.proposal.record])
        self.store(state)
        if isinstance(reply, Promise):
            reply = reply._replace(stored=self.stored)
        if crash:
            self.crash()  # stored, and the answer lost with the crash
            return None
        return reply

    def store(self, state: AcceptorState) -> None:
        self.durable = b"" if state == AcceptorState() else encode_state(state)

    def collect(self, everywhere: Ballot) -> None:
        sim = self.sim
        if sim.now >= self.down_until and self.state().collectable(everywhere, sim.now - BALLOT_LIFETIME_US):
            self.durable = b""
            sim.collected += 1

    def crash(self) -> None:
        self.down_until = self.sim.now + self.sim.rng.randint(1_000, 100_000)
        self.sim.crashes += 1


class Client:
    """A node's proposer driver: appends its tokens one at a time, each by a serial read then
    conditional writes (If-Match on the version read, or If-None-Match: * on none) until one applies."""

    def __init__(self, sim: Simulation, name: str, appends: int, round_class: type[Round]) -> None:
        self.sim, self.name, self.round_class = sim, name, round_class
        self.node = node_tiebreak(name)
        self.clock = 0
        self.clock_offset = sim.rng.randint(-50_000, 50_000)  # within a maximum skew, either way
        self.todo = [f"{name}-{n}" for n in range(appends)]
        self.round: Round | None = None
        self.rounds = itertools.count()
        self.round_id = -1
        self.round_started = 0
        self.op: Op | None = None

    def next_op(self) -> None:
        if not self.todo:
            self.op = None
            return
        self.op = Op("append", self.sim.now, token=self.todo.pop(0))
        self.begin(write=None, current=None)

    def begin(self, write: Write | None, current: Record | None) -> None:
        condition = None if write is None else IfAbsent() if current is None else IfMatch(etag(current))
        self.round = self.round_class(
            self.sim.owners, self.sim.quorum, write=write, condition=condition, now_us=0
        )
        self.round_id = next(self.rounds)
        self.round_started = self.sim.now
        round_id = self.round_id
        self.sim.after(ROUND_TIMEOUT_US, lambda: self.time_out(round_id))
        self.advance()

    def advance(self) -> None:
        assert self.round is not None
        status = self.round.status
        if isinstance(status, Start):
            self.send(self.round.start(self.ballot_above(status.above)))
        elif isinstance(status, Contended):
            time_left_s = (self.round_started + ROUND_TIMEOUT_US - self.sim.now) / 1e6
            delay_us = int(1e6 * backoff_delay(self.round.contentions, self.sim.rng.random(), time_left_s))
            round_id = self.round_id
            self.sim.after(delay_us, lambda: self.retry(round_id))
        elif not isinstance(status, Waiting):
            self.finish(status)

    def retry(self, round_id: int) -> None:
        if round_id == self.round_id and self.round is not None and isinstance(self.round.status, Contended):
            self.send(self.round.start(self.ballot_above(self.round.status.above)))

    def ballot_above(self, above: Ballot) -> Ballot:
        # A hybrid clock: the node's wall clock, never repeating, moved past the ballot to beat.
        self.clock = max(self.clock + 1, self.sim.now + self.clock_offset, above.micros + 1)
        return next_ballot(self.clock, self.node, above)

    def send(self, sends: list[Send]) -> None:
        round_id = self.round_id
        for send in sends:
            acceptor = self.sim.acceptors[send.to]
            self.sim.deliver(functools.partial(self.call, round_id, acceptor, send.message))

    def call(self, round_id: int, acceptor: Acceptor, message: Request) -> None:
        reply = acceptor.handle(message)
        if reply is not None:
            self.sim.deliver(lambda: self.answered(round_id, acceptor.name, reply))

    def answered(self, round_id: int, owner: str, reply: Reply) -> None:
        if isinstance(reply, Committed):
            self.sim.committed(owner, reply.ballot)
        if round_id != self.round_id or self.round is None:
            return  # a finished round's call: the driver has dropped it
        self.send(self.round.receive(owner, reply))
        self.advance()

    def time_out(self, round_id: int) -> None:
        if round_id == self.round_id and self.round is not None:
            outcome = self.round.time_out()
            if isinstance(outcome, Unknown):
                self.finish(outcome)

    def finish(self, outcome: Outcome) -> None:
        op, now = self.op, self.sim.now
        assert op is not None and self.round is not None
        round_invoked = self.round_started
        self.sim.contentions += self.round.contentions
        self.round = None
        self.round_id = -1
        if isinstance(outcome, Unknown):
            self.sim.unknown += 1
            self.sim.history.append(op)  # completed stays None: it may or may not have happened
            return self.next_op()
        if isinstance(outcome, Applied):
            op.completed, op.seen = now, tokens_of(outcome.record)
            self.sim.history.append(op)
            return self.next_op()
        current = outcome.current
        self.sim.history.append(Op("read", round_invoked, now, seen=tokens_of(current)))
        if op.kind == "read":
            return None  # the final read
        value = ",".join((*tokens_of(current), op.token)).encode()
        self.begin(Write.put(value), current)


class Simulation:
    def __init__(self, seed: int, owners: int, faults: Faults, round_class: type[Round] = Round) -> None:
        self.rng = random.Random(seed)
        self.faults = faults
        self.now = 0
        self.events: list[Event] = []
        self.order = itertools.count()
        self.owners = [f"n{i}" for i in range(owners)]
        self.quorum = Majorities.of(self.owners)
        self.acceptors = {name: Acceptor(self, name) for name in self.owners}
        self.commit_acks: dict[Ballot, set[str]] = {}
        self.history: list[Op] = []
        self.round_class = round_class
        self.crashes = self.collected = self.unknown = self.contentions = 0

    def after(self, delay_us: int, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, Event(self.now + delay_us, next(self.order), action))

    def deliver(self, action: Callable[[], None]) -> None:
        """A message over the network: lost, duplicated, delayed and reordered as the faults say."""
        rng, faults = self.rng, self.faults
        if rng.random() < faults.drop:
            return
        for _ in range(2 if rng.random() < faults.duplicate else 1):
            slow = rng.random() < faults.slow
            self.after(rng.randint(20_000, 150_000) if slow else rng.randint(100, 2_000), action)

    def committed(self, owner: str, ballot: Ballot) -> None:
        """A commit acknowledged: once every owner did, each is asked to collect its state at once, and
        again once the commit is older than a ballot's lifetime (only then may it)."""
        acks = self.commit_acks.setdefault(ballot, set())
        acks.add(owner)
        if len(acks) == len(self.owners):
            for acceptor in self.acceptors.values():
                collect = functools.partial(acceptor.collect, ballot)
                self.deliver(collect)
                self.after(BALLOT_LIFETIME_US, functools.partial(self.deliver, collect))

    def run(self, clients: int, appends: int) -> tuple[str, ...]:
        """Every client's appends, then (the faults healed) a serial read of the final list."""
        workers = [Client(self, f"c{n}", appends, self.round_class) for n in range(clients)]
        for worker in workers:
            self.after(self.rng.randint(0, 1_000), worker.next_op)
        self.drain()
        self.faults = Faults()
        for acceptor in self.acceptors.values():
            acceptor.down_until = 0
        final = Client(self, "final", 0, Round)
        final.op = Op("read", self.now)
        final.begin(write=None, current=None)
        self.drain()
        return self.history[-1].seen

    def drain(self) -> None:
        while self.events:
            event = heapq.heappop(self.events)
            self.now = event.time
            event.action()


def linearizability_problems(history: list[Op], final: tuple[str, ...]) -> list[str]:
    """What makes a list-append history not linearizable, given the final list (every state a read or an
    append saw must be a prefix of it, as appends only ever add to the end)."""
    problems = [f"{token} appended twice" for token in sorted(set(final)) if final.count(token) > 1]
    appends = {op.token: op for op in history if op.kind == "append"}
    problems += [f"{token} in the list but never appended" for token in final if token not in appends]
    problems += [
        f"{op.token} acknowledged but lost"
        for op in appends.values()
        if op.completed is not None and op.token not in final
    ]
    position: dict[int, int] = {}  # an op's place in the one order: an append's index, a read's length
    for n, op in enumerate(history):
        if (op.kind == "read" or op.completed is not None) and op.seen != final[: len(op.seen)]:
            problems.append(f"{op.kind} saw {op.seen}, not a prefix of the final list")
            continue
        if op.kind == "read":
            position[n] = len(op.seen)
        elif op.token in final:
            position[n] = final.index(op.token)
            if op.completed is not None and len(op.seen) != position[n] + 1:
                problems.append(f"{op.token} wrote a list it does not end")
    for (m, before), (n, after) in itertools.permutations(enumerate(history), 2):
        if (
            before.completed is None
            or m not in position
            or n not in position
            or before.completed >= after.invoked
        ):
            continue
        strictly = before.kind == "append"  # an append takes a place; a read sits between two
        if position[m] > position[n] or (strictly and after.kind == "append" and position[m] == position[n]):
            problems.append(
                f"{before.kind} {before.token or before.seen} ended before {after.kind} "
                f"{after.token or after.seen} began, yet is ordered after it"
            )
        if strictly and after.kind == "read" and position[m] >= position[n]:
            problems.append(f"read {after.seen} began after {before.token} was acknowledged, without it")
    return problems


def simulate(seed: int, owners: int, round_class: type[Round] = Round) -> tuple[list[str], Simulation]:
    sim = Simulation(seed, owners, FAULTY, round_class)
    final = sim.run(clients=4, appends=5)
    return linearizability_problems(sim.history, final), sim


class IgnoresAcceptedValues(Round):
    """A planted defect: a proposer that never completes what its promises report accepted."""

    def unfinished(self) -> Proposal | None:
        return None


@pytest.mark.parametrize("owners", [3, 5])
def test_concurrent_appends_through_faults_are_linearizable(owners: int) -> None:
    totals = {"crashes": 0, "collected": 0, "unknown": 0, "contentions": 0, "appended": 0}
    for seed in range(16):
        problems, sim = simulate(seed, owners)
        assert problems == [], f"seed {seed}: {problems}"
        totals["crashes"] += sim.crashes
        totals["collected"] += sim.collected
        totals["unknown"] += sim.unknown
        totals["contentions"] += sim.contentions
        totals["appended"] += sum(1 for op in sim.history if op.kind == "append" and op.completed is not None)
    # The faults happened: the check is not passing on a quiet run.
    assert all(total > 0 for total in totals.values()), totals


def test_the_check_catches_a_proposer_that_ignores_accepted_values() -> None:
    failing = []
    for seed in range(10):
        problems, _ = simulate(seed, 3, IgnoresAcceptedValues)
        if problems:
            failing.append((seed, problems))
    assert failing, "the planted defect went unnoticed"
    assert any("lost" in problem or "twice" in problem for _, problems in failing for problem in problems)


def test_the_checker_finds_each_kind_of_problem() -> None:
    x, y = Op("append", 0, 10, "x", ("x",)), Op("append", 20, 30, "y", ("x", "y"))
    read = Op("read", 40, 50, seen=("x", "y"))
    assert linearizability_problems([x, y, read], ("x", "y")) == []
    assert linearizability_problems([x, y], ("x", "y", "x")) == ["x appended twice"]
    assert linearizability_problems([x], ("x", "z")) == ["z in the list but never appended"]
    assert "y acknowledged but lost" in linearizability_problems([x, y], ("x",))
    assert linearizability_problems([x, Op("read", 40, 50, seen=("y",))], ("x",)) == [
        "read saw ('y',), not a prefix of the final list"
    ]
    late = Op("read", 40, 50, seen=())
    assert linearizability_problems([x, late], ("x",)) == [
        "read () began after x was acknowledged, without it"
    ]
    # y was acknowledged having seen z, though z began only after.
    y, z = Op("append", 20, 30, "y", ("z", "y")), Op("append", 35, 45, "z", ("z",))
    assert linearizability_problems([y, z], ("z", "y")) == [
        "append y ended before append z began, yet is ordered after it"
    ]
    unknown = Op("append", 0, None, "u")  # never acknowledged: in the list or not, both are fine
    assert (
        linearizability_problems([x, unknown], ("x",))
        == linearizability_problems([x, unknown], ("x", "u"))
        == []
    )
