"""One conditional write (or serial read) on one key as a Paxos proposer: a pure state machine over the
key's owners, which the driver feeds with ballots and replies and whose sends it makes (etcd raft's
style: no I/O, no timers, no clock read inside).

An attempt runs these phases, each waiting for a quorum of the owners (``Quorum``: a majority of the
current owners and, while a change moves the key, of the owners gaining it)::

    PREPARE ──> COMPLETE ──> COMPLETE_COMMIT ──> (a new attempt: Start)
       │
       ├──> CATCH_UP ──┐
       └───────────────┴──> read, judge the condition ──> PROPOSE ──> COMMIT ──> Applied
                                      └──> NotApplied / Read

1. PREPARE: a ``Prepare`` at this attempt's ballot to every owner; a quorum's promises carry their
   accepted proposals, most recent commits and stored versions.
2. An accepted proposal newer than every commit the promisers reported may have been chosen: the round
   completes it first (COMPLETE: proposed again at this ballot, COMPLETE_COMMIT: committed), then
   starts over with a new ballot (``Start``), as Cassandra does.
3. CATCH_UP: promisers behind the most recent commit, or holding an older version than the newest among
   the promisers, are sent that version as a commit of the most recent commit's ballot, until a quorum
   holds it: what the round answers or builds on is then on a quorum.
4. The current version is the newest the promisers store. A serial read answers it (``Read``); a write
   whose condition does not hold answers ``NotApplied`` with it; otherwise PROPOSE the new version,
   stamped above every version the round saw and at or above the ballot's clock reading, then COMMIT
   it (a normal write of it to every owner), and answer ``Applied`` once a quorum stored it.

Refusals end the attempt (``Contended``) once the owners that have not refused can no longer be a quorum:
the driver waits ``backoff_delay`` and starts again above the highest ballot they named. Until then the
attempt goes on, since a refusal is no news about the other owners: accepts from a quorum choose its
proposal, however many others refused it (ending at the first refusal would leave a chosen proposal's
outcome unknown). A proposal of this round may then have been chosen by
some acceptors' accepts; the next attempt finds it (completed, or as the stored version) and answers
``Applied``, or, when a newer version hides whether it was, ``Unknown``. Replies from another attempt,
another phase, an owner that already answered, or an owner not asked are ignored. An uncontended write
makes at most four round trips: prepare, a catch-up, propose, commit.

    >>> from kvnode.paxos.ballot import Ballot
    >>> from kvnode.paxos.conditions import IfAbsent
    >>> from kvnode.paxos.messages import Accepted, Committed, Promise
    >>> owners = ["a", "b", "c"]
    >>> write = Round(owners, Majorities.of(owners), write=Write.put(b"v"), condition=IfAbsent(), now_us=5)
    >>> ballot = Ballot(10, 1)
    >>> [send.to for send in write.start(ballot)]
    ['a', 'b', 'c']
    >>> write.receive("a", Promise(ballot, None, Ballot(0, 0))); write.status.phase.name
    []
    'PREPARE'
    >>> [type(send.message).__name__ for send in write.receive("b", Promise(ballot, None, Ballot(0, 0)))]
    ['Propose', 'Propose', 'Propose']
    >>> _ = write.receive("a", Accepted(ballot)); _ = write.receive("c", Accepted(ballot))
    >>> _ = write.receive("b", Committed(ballot)); write.receive("c", Committed(ballot)); write.status
    []
    Applied(record=Record(timestamp=10, tombstone=False, value=b'v', expires=0, copies=0))
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence, Set
from typing import NamedTuple, Protocol

from kvnode.paxos.ballot import ZERO_BALLOT, Ballot
from kvnode.paxos.conditions import Condition, holds
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
from kvnode.storage.records import Record, newest

__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_CAP_S",
    "Applied",
    "Contended",
    "ImpossibleStep",
    "Majorities",
    "NotApplied",
    "Outcome",
    "Phase",
    "Quorum",
    "Read",
    "Round",
    "Send",
    "Start",
    "Status",
    "Unknown",
    "Waiting",
    "Write",
    "backoff_delay",
]

# Contention backoff: full jitter below a ceiling that doubles per contention from the base up to the
# cap (Cassandra's v1 proposer sleeps a uniform 0-100 ms); never past the round's time left.
BACKOFF_BASE_S = 0.002
BACKOFF_CAP_S = 0.1


class Quorum(Protocol):
    """Whether the owners that answered a phase are enough."""

    def __call__(self, answered: Set[str]) -> bool: ...


class Majorities(NamedTuple):
    """A majority of each group: the key's current owners and, while a change moves the key, the owners
    gaining it (as Cassandra counts pending endpoints). An empty group asks nothing.

    >>> quorum = Majorities.of(["a", "b", "c"], gaining=["d"])
    >>> quorum({"a", "b"}), quorum({"a", "b", "d"})
    (False, True)
    """

    groups: tuple[frozenset[str], ...]

    @classmethod
    def of(cls, current: Iterable[str], gaining: Iterable[str] = ()) -> Majorities:
        return cls((frozenset(current), frozenset(gaining)))

    def __call__(self, answered: Set[str]) -> bool:
        return all(2 * len(group & answered) > len(group) for group in self.groups if group)


class Write(NamedTuple):
    """The version a conditional write stores, before its round stamps it: a value (with a TTL in the
    clock's microseconds, 0: none) or a delete."""

    tombstone: bool
    value: bytes = b""
    ttl_us: int = 0

    @classmethod
    def put(cls, value: bytes, ttl_us: int = 0) -> Write:
        return cls(False, value, ttl_us)

    @classmethod
    def delete(cls) -> Write:
        return cls(True)

    def stamped(self, timestamp: int) -> Record:
        if self.tombstone:
            return Record.delete(timestamp)
        return Record.put(timestamp, self.value, ttl_us=self.ttl_us)


class Phase(enum.Enum):
    PREPARE = "prepare"  # waiting for promises
    COMPLETE = "complete"  # proposing an unfinished proposal again, at this ballot
    COMPLETE_COMMIT = "complete-commit"  # committing it
    CATCH_UP = "catch-up"  # the current version to promisers behind it
    PROPOSE = "propose"  # this round's new version
    COMMIT = "commit"


class Send(NamedTuple):
    to: str  # an owner
    message: Request


class Waiting(NamedTuple):
    """An attempt in flight: what it waits for (the driver names it in a timeout's reason)."""

    phase: Phase
    ballot: Ballot
    answered: frozenset[str]
    awaited: frozenset[str]  # asked in this phase and silent so far


class Start(NamedTuple):
    """The round needs a ballot above ``above`` now: it is new, or it completed an unfinished proposal."""

    above: Ballot


class Contended(NamedTuple):
    """An acceptor promised or committed the higher ballot ``above``: back off, then start above it."""

    above: Ballot


class Applied(NamedTuple):
    record: Record  # the version written


class NotApplied(NamedTuple):
    current: Record | None  # the version the condition failed on (None: the key has none)


class Read(NamedTuple):
    current: Record | None  # a serial read's answer


class Unknown(NamedTuple):
    """The round cannot tell whether its write took effect (the next round on the key settles it)."""

    reason: str


Outcome = Applied | NotApplied | Read | Unknown
Status = Waiting | Start | Contended | Outcome


# The reply each phase waits for, and the phases whose requests an acceptor may refuse (a commit never is).
_ANSWER: dict[Phase, type[Promise | Accepted | Committed]] = {
    Phase.PREPARE: Promise,
    Phase.COMPLETE: Accepted,
    Phase.COMPLETE_COMMIT: Committed,
    Phase.CATCH_UP: Committed,
    Phase.PROPOSE: Accepted,
    Phase.COMMIT: Committed,
}
_REFUSABLE = frozenset({Phase.PREPARE, Phase.COMPLETE, Phase.PROPOSE})


class ImpossibleStep(RuntimeError):
    """The driver started a round that is not waiting for a ballot, or with one not above the last."""


class Round:
    """A conditional write (``write``, under ``condition``) or, without ``write``, a serial read.
    ``now_us`` is the instant the condition judges an expiry at."""

    def __init__(
        self,
        owners: Sequence[str],
        quorum: Quorum,
        *,
        write: Write | None = None,
        condition: Condition | None = None,
        now_us: int,
    ) -> None:
        if not quorum(frozenset(owners)):
            raise ValueError(f"a quorum can never answer: every owner ({', '.join(owners)}) is not enough")
        if write is None and condition is not None:
            raise ValueError("a serial read has no condition")
        self.owners = tuple(owners)
        self.quorum = quorum
        self.write = write
        self.condition = condition
        self.now_us = now_us
        self.ballot = ZERO_BALLOT  # this attempt's
        self.attempts = 0
        self.contentions = 0
        self.proposed: list[Record] = []  # this round's new versions, one per attempt that proposed
        self._status: Start | Contended | Outcome | None = Start(ZERO_BALLOT)  # None: an attempt in flight
        self._phase = Phase.PREPARE
        self._expected = ZERO_BALLOT  # the ballot this phase's replies carry
        self._asked: frozenset[str] = frozenset()
        self._answered: set[str] = set()
        self._refused: dict[str, Ballot] = {}  # this phase's refusals: who, and the ballot each named
        self._promises: dict[str, Promise] = {}
        self._proposal = Proposal(ZERO_BALLOT, Record.delete(0))  # what COMPLETE or PROPOSE proposes
        self._current: Record | None = None  # the newest version the promisers store

    @property
    def status(self) -> Status:
        if self._status is None:
            return Waiting(self._phase, self.ballot, frozenset(self._answered), self._asked - self._answered)
        return self._status

    def start(self, ballot: Ballot) -> list[Send]:
        """A new attempt at ``ballot`` (above ``status.above``): the prepares to send."""
        if not isinstance(self._status, Start | Contended):
            raise ImpossibleStep(f"a round that is {type(self._status).__name__} cannot start an attempt")
        if ballot <= self._status.above:
            raise ImpossibleStep(f"ballot {ballot} is not above {self._status.above}")
        self.ballot = ballot
        self.attempts += 1
        self._promises = {}
        self._status = None
        return self._ask(Phase.PREPARE, self.owners, Prepare(ballot), ballot)

    def receive(self, owner: str, reply: Reply) -> list[Send]:
        """An owner's reply to one of this round's sends: what to send next (often nothing)."""
        if self._status is not None or owner not in self._asked:
            return []
        if isinstance(reply, Refused):
            if reply.ballot == self._expected and self._phase in _REFUSABLE and owner not in self._answered:
                self._refused[owner] = reply.promised
                if not self.quorum(self._asked - self._refused.keys()):  # the others cannot be enough
                    self.contentions += 1
                    self._status = Contended(max(self.ballot, *self._refused.values()))
            return []  # else a refusal of another attempt or phase: no news
        if not isinstance(reply, _ANSWER[self._phase]) or reply.ballot != self._expected:
            return []  # a reply to another phase or attempt
        if owner in self._answered:
            return []
        if isinstance(reply, Promise):
            self._promises[owner] = reply
        self._answered.add(owner)
        if not self.quorum(self._answered):
            return []
        return self._next()

    def time_out(self) -> Outcome:
        """The driver's time is up: the outcome, Unknown unless the round had one."""
        if isinstance(self._status, Applied | NotApplied | Read | Unknown):
            return self._status
        if self._status is None:
            silent = ", ".join(sorted(self._asked - self._answered))
            reason = f"no quorum in the {self._phase.value} phase before the timeout (silent: {silent})"
        elif isinstance(self._status, Contended):
            reason = f"contended by ballot {self._status.above} until the timeout"
        else:
            reason = "no attempt started before the timeout"
        self._status = Unknown(reason)
        return self._status

    def unfinished(self) -> Proposal | None:
        """The accepted proposal the round must complete before anything else: the latest the promisers
        reported, when it is newer than every commit they reported (an older one was voided by it)."""
        committed = max(promise.committed for promise in self._promises.values())
        accepted = (promise.accepted for promise in self._promises.values() if promise.accepted is not None)
        latest = max(accepted, key=lambda proposal: proposal.ballot, default=None)
        return latest if latest is not None and latest.ballot > committed else None

    def _next(self) -> list[Send]:
        """The phase reached its quorum: on to the next."""
        phase = self._phase
        if phase is Phase.PREPARE:
            return self._promised()
        if phase in (Phase.COMPLETE, Phase.PROPOSE):
            committing = Phase.COMMIT if phase is Phase.PROPOSE else Phase.COMPLETE_COMMIT
            return self._ask(committing, self.owners, Commit(self._proposal), self.ballot)
        if phase is Phase.CATCH_UP:
            return self._judge()
        record = self._proposal.record
        if phase is Phase.COMMIT or record in self.proposed:  # a completed proposal of its own
            self._status = Applied(record)
        else:
            self._status = Start(self.ballot)
        return []

    def _promised(self) -> list[Send]:
        promises = self._promises
        self._current = current = newest(promise.stored for promise in promises.values())
        unfinished = self.unfinished()
        # An unfinished proposal whose version a promiser already stores (or stores a newer one of) needs no
        # completing: committing it would store nothing new anywhere (a store keeps the newest version), and
        # the catch-up below brings that version to a quorum. Completing it anyway made contending rounds
        # chase each other's completions of one version until their time ran out.
        if unfinished is not None and (current is None or unfinished.record > current):
            self._proposal = Proposal(self.ballot, unfinished.record)
            return self._ask(Phase.COMPLETE, self.owners, Propose(self._proposal), self.ballot)
        if current is None:  # nothing stored to catch anyone up with
            return self._judge()
        committed = max(promise.committed for promise in promises.values())
        behind = [
            owner
            for owner, promise in promises.items()
            if promise.committed < committed or promise.stored != current
        ]
        if not behind:
            return self._judge()
        up_to_date = set(promises) - set(behind)
        catch_up = Commit(Proposal(committed, current))
        if self.quorum(up_to_date):  # a quorum holds it already: catch the others up on the way
            return [Send(owner, catch_up) for owner in behind] + self._judge()
        sends = self._ask(Phase.CATCH_UP, behind, catch_up, committed)
        self._answered = up_to_date
        return sends

    def _judge(self) -> list[Send]:
        """The current version is on a quorum: answer, or propose the new one."""
        current = self._current
        if current is not None and current in self.proposed:
            self._status = Applied(current)
            return []
        if current is not None and any(current.timestamp >= mine.timestamp for mine in self.proposed):
            # A version newer than one this round proposed: it may be built on that one (accepted,
            # completed by a round, then overwritten) or not. Which owners refused a proposal tells
            # nothing: an owner refuses a duplicate of a proposal it accepted once a higher ballot came.
            self._status = Unknown("a newer version hides whether this round's write took effect")
            return []
        if self.write is None:
            self._status = Read(current)
            return []
        if not holds(self.condition, current, self.now_us):
            self._status = NotApplied(current)
            return []
        record = self.write.stamped(self._stamp())
        self.proposed.append(record)
        self._proposal = Proposal(self.ballot, record)
        return self._ask(Phase.PROPOSE, self.owners, Propose(self._proposal), self.ballot)

    def _stamp(self) -> int:
        """The new version's timestamp: at or above the ballot's clock reading, above every version seen."""
        seen = [self.ballot.micros - 1] + [record.timestamp for record in self.proposed]
        for promise in self._promises.values():
            if promise.stored is not None:
                seen.append(promise.stored.timestamp)
            if promise.accepted is not None:
                seen.append(promise.accepted.record.timestamp)
        return max(seen) + 1

    def _ask(self, phase: Phase, owners: Iterable[str], message: Request, expected: Ballot) -> list[Send]:
        self._phase = phase
        self._expected = expected
        self._answered = set()
        self._refused = {}
        sends = [Send(owner, message) for owner in owners]
        self._asked = frozenset(send.to for send in sends)
        return sends


def backoff_delay(contentions: int, random: float, time_left_s: float) -> float:
    """Seconds to wait after the ``contentions``-th contention of a round, ``random`` drawn uniformly
    from [0, 1): full jitter below a ceiling doubling from BACKOFF_BASE_S to BACKOFF_CAP_S, and never
    past the round's ``time_left_s``.

    >>> backoff_delay(1, 0.5, 10.0), backoff_delay(30, 0.5, 10.0), backoff_delay(30, 0.5, 0.01)
    (0.001, 0.05, 0.01)
    """
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** min(max(contentions, 1) - 1, 16))
    return max(0.0, min(time_left_s, random * ceiling))
