"""When a stored version that reads as absent may be dropped for good (tombstone GC). Pure: no I/O.

A tombstone, or a version whose TTL ran out (it reads as absent and hides older versions just as a tombstone
does), may be dropped once (a) it became absent longer than the grace period ago by the hybrid clock (a
tombstone at its timestamp, an expired version at its expiry), and (b) every other replica of its key (of its
N owners) has completed a repair with this node that started after the version reached this node: such a
repair gave the peer this version (or a newer one), so once it is dropped here no replica holds an older value
it was hiding. docs/gc.md says why nothing can then bring the deleted value back.

A version this node holds but no longer owns (a member joined, or one it replaced left: the key's owners
changed) is a surplus copy, handed over the same way: once the membership has been settled (no member
joining or leaving) for longer than the grace period, it may be dropped once its owners hold it
(kvnode.healing.gc confirms): a node that no longer owns a key drops it after a grace period. A cleanup
(``admin cleanup``) judges a live surplus copy droppable as soon as the membership is settled, without
the grace period; a surplus tombstone or expired version keeps it, since it is what beats an older value
that may still reach this node.

When a version reached this node is not stored; its timestamp bounds it, a known time later
(``arrival_us``): a write reaches its replicas within the replica timeout, a hint within the hint window
(older hints are dropped), each stamped by a clock at most the maximum skew off this one. (b) asks for
a repair that started after the timestamp plus that bound, and (a) counts the grace period from the
same bound past the time the version became absent, so that a hint of an older value, which may arrive
as late, finds the version still here.

>>> placement = Placement(["http://a:1", "http://b:1", "http://c:1"])
>>> rule = GcRule("http://a:1", placement, grace_us=100, arrival_us=10)
>>> marks = {"http://b:1": 1_000, "http://c:1": 0}
>>> rule.judge(b"k", Record.delete(500), now=700, completed=marks.__getitem__)
Verdict(outcome=<Outcome.WAIT: 'wait'>, waiting_for=('http://c:1',))
>>> marks["http://c:1"] = 511
>>> rule.judge(b"k", Record.delete(500), now=700, completed=marks.__getitem__).outcome
<Outcome.DROP: 'drop'>
>>> rule.judge(b"k", Record.delete(500), now=610, completed=marks.__getitem__).outcome   # in its grace
<Outcome.KEEP: 'keep'>
>>> two_owners = Placement(["http://a:1", "http://b:1", "http://c:1"], replication=2)  # k's: a and b
>>> rule = GcRule("http://c:1", two_owners, grace_us=100, arrival_us=10, settled_since=600)
>>> rule.judge(b"k", Record.put(500, b"v"), now=700, completed=marks.__getitem__).outcome  # in the grace
<Outcome.SURPLUS: 'surplus'>
>>> rule.judge(b"k", Record.put(500, b"v"), now=700, completed=marks.__getitem__, cleanup=True).outcome
<Outcome.UNOWNED: 'unowned'>
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import NamedTuple

from kvnode.storage.records import Record
from kvnode.topology.epoch import Epoch
from kvnode.topology.placement import Placement

__all__ = ["GcRule", "Outcome", "Verdict"]


class Outcome(enum.Enum):
    KEEP = "keep"  # live, or absent for less than the grace period
    WAIT = "wait"  # past its grace, but some replica has not completed a repair with this node since
    DROP = "drop"
    UNOWNED = "unowned"  # a surplus copy that may go (past the grace period): dropped once its owners hold it
    SURPLUS = "surplus"  # not this node's any more, kept: within the grace period, or a change under way


class Verdict(NamedTuple):
    outcome: Outcome
    waiting_for: tuple[str, ...] = ()  # with WAIT: the replicas a repair is still needed with


_KEEP = Verdict(Outcome.KEEP)
_DROP = Verdict(Outcome.DROP)
_UNOWNED = Verdict(Outcome.UNOWNED)
_SURPLUS = Verdict(Outcome.SURPLUS)


class GcRule:
    """The rule for one node: its URL and placement, the grace period and the arrival bound, and since when
    the membership has been settled, None while a member joins or leaves (the clock's microseconds)."""

    def __init__(
        self,
        own_url: str,
        placement: Placement,
        *,
        grace_us: int,
        arrival_us: int,
        settled_since: int | None = None,
    ) -> None:
        self.own_url = own_url
        self.placement = placement
        self.grace_us = grace_us
        self.arrival_us = arrival_us
        self.settled_since = settled_since
        self._everyone_else = tuple(url for url in placement.nodes if url != own_url)

    def following(self, epoch: Epoch[object]) -> GcRule:
        """The same rule for another membership: its placement, and since when it has been settled."""
        return GcRule(
            self.own_url,
            epoch.placement,
            grace_us=self.grace_us,
            arrival_us=self.arrival_us,
            settled_since=epoch.settled_since,
        )

    def judge(
        self, key: bytes, record: Record, *, now: int, completed: Callable[[str], int], cleanup: bool = False
    ) -> Verdict:
        """Whether ``record``, key's stored version, may be dropped at ``now``; ``completed(peer)`` is
        when the last repair with peer that completed started (kvnode.storage.system_db.RepairMarks).
        ``cleanup``: a live surplus copy may go without the grace period (``admin cleanup``)."""
        others = self.other_replicas(key, record.copies)
        if others is None:  # this node should not hold it at all
            settled = self.settled_since
            if settled is None:  # a change under way: its owners are not final
                return _SURPLUS
            if cleanup and not record.absent_at(now):
                return _UNOWNED
            return _UNOWNED if now - settled > self.grace_us + self.arrival_us else _SURPLUS
        if not record.absent_at(now):
            return _KEEP
        absent_since = record.timestamp if record.tombstone else record.expires
        if now - absent_since <= self.grace_us + self.arrival_us:
            return _KEEP
        reached_by = record.timestamp + self.arrival_us
        waiting = tuple(peer for peer in others if completed(peer) <= reached_by)
        return Verdict(Outcome.WAIT, waiting) if waiting else _DROP

    def other_replicas(self, key: bytes, copies: int) -> tuple[str, ...] | None:
        """The replicas of a version written to ``copies`` (0: the key's N owners) other than this node;
        None when this node is not one of them."""
        if copies == 0 and self.placement.everyone_owns:
            return self._everyone_else
        replicas = self.placement.owners(key, copies)
        if self.own_url not in replicas:
            return None
        return tuple(url for url in replicas if url != self.own_url)

    def owners(self, key: bytes, copies: int) -> list[str]:
        """The replicas of a version written to ``copies`` (0: the key's N owners)."""
        return self.placement.owners(key, copies)
