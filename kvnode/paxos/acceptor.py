"""A Paxos acceptor's state for one key, as an immutable value with its transitions (pure), and its byte
codec: what the node stores before it answers (as Cassandra's ``PaxosState``).

The state is the ballot promised, the proposal accepted and not yet committed, and the ballot of the
most recent commit. Each transition returns the next state and the answer; the driver stores the next
state (when it differs) durably *before* it sends the answer, so a promise or an acceptance survives a
``kill -9`` once anyone may have heard of it, and one lost in a crash before it was stored was never
heard of by anyone. ``oldest`` is the driver's clock reading less ``BALLOT_LIFETIME_US``::

    >>> from kvnode.paxos.ballot import Ballot
    >>> from kvnode.storage.records import Record
    >>> state = AcceptorState()
    >>> state, answer = state.prepare(Ballot(10, 1), oldest=0); type(answer).__name__
    'Promise'
    >>> state, answer = state.prepare(Ballot(9, 2), oldest=0); answer      # below the promise
    Refused(ballot=Ballot(micros=9, node=2), promised=Ballot(micros=10, node=1))
    >>> proposal = Proposal(Ballot(10, 1), Record.put(10, b"v"))
    >>> state, answer = state.propose(proposal, oldest=0); answer
    Accepted(ballot=Ballot(micros=10, node=1))
    >>> state = state.commit(Ballot(10, 1)); state.accepted, state.committed
    (None, Ballot(micros=10, node=1))
    >>> state.collectable(everywhere=Ballot(10, 1), oldest=0), state.collectable(Ballot(10, 1), oldest=11)
    (False, True)
    >>> decode_state(encode_state(state)) == state
    True

Rules, each stricter than plain Paxos needs, never looser:

- A prepare is promised when its ballot is at or above the promise (a retried prepare is answered again,
  with the same news) and above the most recent commit. The promise carries the accepted proposal and
  the most recent commit's ballot; its ``stored`` field is left for the driver to fill with the key's
  stored version, read after the promise is stored.
- A proposal is accepted only at exactly the ballot promised: never one whose prepare this acceptor did
  not answer, so a late proposal from a round that has lost its promise to a higher ballot is refused.
- A commit raises the promise and the most recent commit to its ballot, and voids an accepted proposal
  at or below it: a round that committed at ballot C had a majority's promises, so it saw (and
  completed, or built on) anything chosen below C, and an older proposal proposed again would undo it.
  The driver stores the commit's record as a normal write in the same batch as the state.
- A prepare or proposal whose ballot is older than ``oldest`` is refused, naming ``Ballot(oldest, 0)``:
  no live round holds a ballot that old (a round lasts seconds), and it is what makes collection safe.

Collection. Once a commit reached every owner (each acknowledged it), no owner holds a proposal it
voids, and an acceptor whose state is that commit and nothing since may drop its state, which leaves
``AcceptorState()`` (``collectable``), once the commit is older than ``oldest`` too. Forgetting the
promise is then harmless: a late prepare or proposal from any round below the commit is older still,
and refused. Without the age rule, a prepare and a proposal of a round long lost, delayed in the
network, could arrive after the collection, be promised and accepted, and be completed by the next
round over the version committed since (the simulation in the tests found exactly that). Dropping the
state before the commit reached every owner would be wrong as well: another owner could still hold an
accepted proposal that only this acceptor's commit voids, and a round would complete it.
"""

from __future__ import annotations

from typing import NamedTuple

from kvnode.paxos.ballot import BALLOT_BYTES, ZERO_BALLOT, Ballot, decode_ballot, encode_ballot
from kvnode.paxos.messages import Accepted, Promise, Proposal, Refused, decode_proposal, encode_proposal

__all__ = ["BALLOT_LIFETIME_US", "AcceptorState", "decode_state", "encode_state"]

# How old a ballot (by the acceptor's clock) may be and still be taken: far above the longest round (the
# request timeout, a second by default) plus twice the maximum clock skew, so no live round is refused.
BALLOT_LIFETIME_US = 60_000_000

_FORMAT = 1  # the first byte of a stored state: a later layout gets another
_HAS_ACCEPTED = 0x01
_HEAD = 1 + 2 * BALLOT_BYTES + 1


class AcceptorState(NamedTuple):
    promised: Ballot = ZERO_BALLOT  # never below ``committed``: a commit raises it
    accepted: Proposal | None = None  # accepted and not voided by a commit at or above its ballot
    committed: Ballot = ZERO_BALLOT  # the most recent commit's

    def prepare(self, ballot: Ballot, oldest: int) -> tuple[AcceptorState, Promise | Refused]:
        if ballot.micros < oldest:
            return self, Refused(ballot, max(self.promised, Ballot(oldest, 0)))
        if ballot < self.promised or ballot <= self.committed:
            return self, Refused(ballot, self.promised)
        return self._replace(promised=ballot), Promise(ballot, self.accepted, self.committed)

    def propose(self, proposal: Proposal, oldest: int) -> tuple[AcceptorState, Accepted | Refused]:
        ballot = proposal.ballot
        if ballot.micros < oldest:
            return self, Refused(ballot, max(self.promised, Ballot(oldest, 0)))
        if ballot != self.promised or ballot <= self.committed:
            return self, Refused(ballot, self.promised)
        return self._replace(accepted=proposal), Accepted(ballot)

    def commit(self, ballot: Ballot) -> AcceptorState:
        accepted = self.accepted
        if accepted is not None and accepted.ballot <= ballot:
            accepted = None
        return AcceptorState(max(self.promised, ballot), accepted, max(self.committed, ballot))

    def expired(self, before_us: int) -> bool:
        """Whether every ballot of this state is older than ``before_us``: the grace period past its last
        round, every owner drops it alike (as tombstone GC drops a tombstone), accepted proposal and all.

        >>> from kvnode.storage.records import Record
        >>> done = AcceptorState(Ballot(10, 1), None, Ballot(10, 1))
        >>> done.expired(11), done.expired(10)
        (True, False)
        >>> done._replace(accepted=Proposal(Ballot(12, 2), Record.put(12, b"v"))).expired(11)
        False
        """
        accepted = ZERO_BALLOT if self.accepted is None else self.accepted.ballot
        return max(self.promised, self.committed, accepted).micros < before_us

    def collectable(self, everywhere: Ballot, oldest: int) -> bool:
        """Whether this state may be dropped now that the commit at ``everywhere`` reached every owner:
        nothing accepted outstanding, nothing promised since that commit, no later commit (which may not
        have reached every owner), and the commit older than ``oldest``."""
        return (
            self.accepted is None
            and self.promised == self.committed == everywhere
            and everywhere.micros < oldest
        )


def encode_state(state: AcceptorState) -> bytes:
    head = bytes([_FORMAT]) + encode_ballot(state.promised) + encode_ballot(state.committed)
    if state.accepted is None:
        return head + b"\x00"
    return head + bytes([_HAS_ACCEPTED]) + encode_proposal(state.accepted)


def decode_state(data: bytes) -> AcceptorState:
    """The state ``encode_state`` stored; ValueError (or kvnode.storage.records.CorruptRecord, one) for
    bytes it did not make."""
    if len(data) < _HEAD:
        raise ValueError(f"a Paxos acceptor state needs at least {_HEAD} bytes, has {len(data)}")
    if data[0] != _FORMAT:
        raise ValueError(f"a Paxos acceptor state of format {data[0]}, not {_FORMAT}")
    promised = decode_ballot(data, 1)
    committed = decode_ballot(data, 1 + BALLOT_BYTES)
    flags = data[_HEAD - 1]
    if flags & ~_HAS_ACCEPTED:
        raise ValueError(f"a Paxos acceptor state with unknown flags 0x{flags:02x}")
    if promised < committed:
        raise ValueError(f"a Paxos acceptor state promised {promised}, below its commit {committed}")
    if not flags:
        if len(data) != _HEAD:
            raise ValueError(f"a Paxos acceptor state has {len(data) - _HEAD} bytes after its fields")
        return AcceptorState(promised, None, committed)
    return AcceptorState(promised, decode_proposal(data[_HEAD:]), committed)
