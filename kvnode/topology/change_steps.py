"""A membership change, step by step, as a pure function returning typed actions (etcd's ``confchange`` and
raft's ``Ready`` are the models: this module says what to do, kvnode.cluster does it and says how it went).

Every change is made the same way: the next version is offered to the claimant first, then stored by the
node making it, then offered to the others (:func:`offer_order` says to whom, in which order).

A node that starts with ``--join`` and whose data dir names it no member (a member's ignores the flags)
first decides where it stands (:func:`start_from`): named by the cluster already (the claimant took its
change before the node crashed: store it and go on), or not yet (make the change).

The change under way (:func:`change_under_way`: a member joining or leaving, or a new replication factor)
is walked by one member, its *walker* (the one joining or leaving; for a new factor, the claimant, which
streams every new copy). :func:`next_action` gives it the action of its next step; the walker does it and
records it in its :class:`Progress`, in memory only: a crash forgets it, and the node started again walks
the steps again from the first, each of them safe to repeat (a barrier already passed, a stream whose
records are there, a version the claimant already took). The last action offers the next version
(settled, without the node, or with the new factor), which ends the change.

>>> joining = Membership.seeded(["http://a:1", "http://b:1"]).with_joining("http://c:1")
>>> change_under_way(joining)
Change(kind=<Kind.JOIN: 'join'>, version=2, walker='http://c:1', member='http://c:1')
>>> progress = Progress(joining.version)
>>> while (action := next_action(joining, "http://c:1", progress)) is not None:
...     print(type(action).__name__); progress = progress.after(action)
AwaitPeers
Drain
RepairWithPeers
OfferNext
>>> progress.to_json()
{'version': 2, 'step': 'done', 'streamed': 0}
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from kvnode.topology.membership import Membership
from kvnode.topology.placement import Placement

__all__ = [
    "Action",
    "AwaitPeers",
    "Change",
    "Drain",
    "Kind",
    "OfferNext",
    "Progress",
    "RepairWithPeers",
    "Start",
    "Step",
    "StreamLeaving",
    "StreamNewCopies",
    "change_under_way",
    "next_action",
    "offer_order",
    "start_from",
]


class Start(enum.Enum):
    STORE = "store"  # the cluster's membership names it: the claimant took its change; store that, go on
    CHANGE = "change"  # make the change: join, or replace a member


def start_from(seeds: Membership, own: str) -> Start:
    """Where a node started with --join stands, from the seed's membership."""
    return Start.STORE if own in seeds.urls else Start.CHANGE


def offer_order(plan: Membership, maker: str, newcomer: bool = False) -> tuple[str, tuple[str, ...]]:
    """Whom ``maker`` offers ``plan``, the next version, to: its claimant first (``maker`` itself, when it
    is: it then stores it before it offers it), then the others, ``maker`` aside. A ``newcomer`` (a node
    making its own join or replace, not a member yet) is never the claimant: in the place of the first
    member (which is down), the next one is.

    >>> first = Membership.seeded(["http://a:1", "http://b:1", "http://c:1"])
    >>> offer_order(first.with_leaving("http://a:1"), "http://b:1")  # the one leaving orders its leave
    ('http://a:1', ('http://c:1',))
    >>> offer_order(first.replaced("http://a:1", "http://n:1"), "http://n:1", newcomer=True)
    ('http://b:1', ('http://c:1',))
    """
    claimant = plan.claimant
    if newcomer and claimant == maker:
        claimant = next(url for url in plan.urls if url != maker)  # none joins: a replace makes no joiner
    return claimant, tuple(url for url in plan.urls if url not in (maker, claimant))


class Kind(enum.Enum):
    JOIN = "join"
    LEAVE = "leave"
    RESIZE = "replication-factor"


@dataclass(frozen=True, slots=True)
class Change:
    """The change a membership has under way: its kind, its version, the member that walks it, and the
    member joining or leaving (None for a new replication factor)."""

    kind: Kind
    version: int
    walker: str
    member: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "member": self.member,
            "walker": self.walker,
            "version": self.version,
        }


def change_under_way(membership: Membership) -> Change | None:
    """The change ``membership`` has under way, None when none is."""
    for url in membership.joining:
        return Change(Kind.JOIN, membership.version, url, url)
    for url in membership.leaving:
        return Change(Kind.LEAVE, membership.version, url, url)
    if membership.next_replication is not None:
        return Change(Kind.RESIZE, membership.version, membership.claimant)
    return None


class Step(enum.Enum):
    BARRIER = "barrier"  # wait until every peer runs with this version (so every write reaches its owners)
    DRAIN = "drain"  # let the writes the peers started before it end (answered, or timed out)
    STREAM = "stream"  # joining: repair with every peer; leaving: each key it owns to its next owner;
    # a new replication factor: every member's versions to the owners each key gains
    FINISH = "finish"  # offer the next version (settled, without this node, or the new factor counting)


@dataclass(frozen=True, slots=True)
class AwaitPeers:
    """Wait until every peer is known to run with ``version`` or a newer one."""

    step: ClassVar[Step] = Step.BARRIER
    version: int


@dataclass(frozen=True, slots=True)
class Drain:
    """Wait for the replica timeout, twice: a write a peer started before the barrier is on its ``ack``
    replicas by then (the rewrite included), or failed."""

    step: ClassVar[Step] = Step.DRAIN


@dataclass(frozen=True, slots=True)
class RepairWithPeers:
    """A member joining: a full anti-entropy repair with every peer, over the keys it shares with each."""

    step: ClassVar[Step] = Step.STREAM


@dataclass(frozen=True, slots=True)
class StreamLeaving:
    """A member leaving: each version it holds to the owners its key gains from ``before`` (with it) to
    ``after`` (without it)."""

    step: ClassVar[Step] = Step.STREAM
    before: Placement
    after: Placement


@dataclass(frozen=True, slots=True)
class StreamNewCopies:
    """The claimant of a new replication factor: every member's versions to the owners each key needs
    under ``after`` (the next factor) and may lack under ``before`` (the present one)."""

    step: ClassVar[Step] = Step.STREAM
    before: Placement
    after: Placement


@dataclass(frozen=True, slots=True)
class OfferNext:
    """Make ``plan``, the version that ends the change of ``kind``, as every change is made (the claimant
    first)."""

    step: ClassVar[Step] = Step.FINISH
    kind: Kind
    plan: Membership


Action = AwaitPeers | Drain | RepairWithPeers | StreamLeaving | StreamNewCopies | OfferNext
_ORDER = tuple(Step)


@dataclass(frozen=True, slots=True)
class Progress:
    """A walker's progress in the change of one membership version (0: none yet): the steps done, in
    order, and the records it streamed; in memory only."""

    version: int
    done: tuple[Step, ...] = ()
    streamed: int = 0

    @property
    def step(self) -> Step | None:
        """The step it takes next; None once it took the last."""
        return _ORDER[len(self.done)] if len(self.done) < len(_ORDER) else None

    def after(self, action: Action) -> Progress:
        """The progress once ``action`` was done."""
        return replace(self, done=(*self.done, action.step))

    def sent(self, records: int) -> Progress:
        """The progress once ``records`` more were streamed."""
        return replace(self, streamed=self.streamed + records)

    def to_json(self) -> dict[str, Any]:
        step = "done" if self.step is None else self.step.value
        return {"version": self.version, "step": step, "streamed": self.streamed}


def next_action(membership: Membership, own: str, progress: Progress) -> Action | None:
    """What this node does next, running with ``membership``: None when the change under way is not its to
    walk (or none is), or once it took the last step. Progress made for another version counts for
    nothing (the membership moved on: start over)."""
    change = change_under_way(membership)
    if change is None or change.walker != own:
        return None
    step = progress.step if progress.version == membership.version else Step.BARRIER
    if step is None:
        return None
    if step is Step.BARRIER:
        return AwaitPeers(membership.version)
    if step is Step.DRAIN:
        return Drain()
    if step is Step.FINISH:
        return OfferNext(change.kind, _ending(membership, change))
    if change.kind is Kind.JOIN:
        return RepairWithPeers()
    home = membership.home_of(own)  # placed as this node places keys (a numeric from's prefix)
    before = membership.read_placement(home) or membership.placement(home)  # the present owners
    if change.kind is Kind.LEAVE:
        return StreamLeaving(before, membership.removed(own).placement(home))
    return StreamNewCopies(before, membership.resettled().placement(home))


def _ending(membership: Membership, change: Change) -> Membership:
    """The version that ends ``change``: the member joining settled, the one leaving removed, or the new
    replication factor counting."""
    if change.kind is Kind.JOIN:
        return membership.settled(change.walker)
    if change.kind is Kind.LEAVE:
        return membership.removed(change.walker)
    return membership.resettled()
