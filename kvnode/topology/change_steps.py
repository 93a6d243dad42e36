"""What a node does next in a membership change (pure: no I/O; kvnode.cluster.changes does each step).

A node that starts with ``--join`` and whose data dir names it no member (a member's ignores the flags)
first decides where it stands (:func:`start_from`): named by the cluster already (the claimant took its
change before the node crashed: store it and go on), or not yet (make the change).

The member a change concerns (:func:`walker`: the one joining or leaving; for a new replication factor,
the claimant, which streams every new copy) then walks :class:`Step` by step (:func:`next_step`), its
progress kept in memory only: a crash forgets it, and the node started again walks the steps again from
the first, each of them safe to repeat (a barrier already passed, a stream whose records are there, a
version the claimant already took). The last step offers the next version (settled, without the node, or
with the new factor); the change is then over, and the node has nothing left to do.

>>> joining = Membership.seeded(["http://a:1", "http://b:1"]).joined("http://c:1")
>>> progress = Progress(joining.version)
>>> steps = []
>>> while (step := next_step(joining, "http://c:1", progress)) is not Step.FINISH:
...     steps.append(step.value); progress = progress.after(step)
>>> steps
['barrier', 'drain', 'stream']
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from kvnode.topology.membership import Membership

__all__ = ["Progress", "Start", "Step", "next_step", "start_from", "walker"]


class Start(enum.Enum):
    STORE = "store"  # the cluster's membership names it: the claimant took its change; store that, go on
    CHANGE = "change"  # make the change: join, or replace a member


def start_from(seeds: Membership, own: str) -> Start:
    """Where a node started with --join stands, from the seed's membership."""
    return Start.STORE if own in seeds.urls else Start.CHANGE


class Step(enum.Enum):
    NONE = "none"  # no change concerns this node
    BARRIER = "barrier"  # wait until every peer runs with this version (so every write reaches its owners)
    DRAIN = "drain"  # let the writes the peers started before it end (answered, or timed out)
    STREAM = "stream"  # joining: repair with every peer; leaving: each key it owns to its next owner;
    # a new replication factor: every member's versions to the owners each key gains
    FINISH = "finish"  # offer the next version (settled, or without this node), the claimant first


@dataclass(frozen=True, slots=True)
class Progress:
    """The steps done for one membership version, in memory only."""

    version: int
    barrier: bool = False
    drained: bool = False
    streamed: bool = False

    def after(self, step: Step) -> Progress:
        """The progress once ``step`` was done."""
        done = {Step.BARRIER: "barrier", Step.DRAIN: "drained", Step.STREAM: "streamed"}.get(step)
        return self if done is None else replace(self, **{done: True})


def walker(membership: Membership) -> str | None:
    """The member that walks the change under way: the one joining or leaving; for a new replication
    factor, the claimant; None when no change is under way."""
    for url in membership.joining | membership.leaving:
        return url
    return membership.claimant if membership.next_replication else None


def next_step(membership: Membership, own: str, progress: Progress) -> Step:
    """The step this node takes next, running with ``membership``; progress made for another version
    counts for nothing (the membership moved on: start over)."""
    if own != walker(membership):
        return Step.NONE
    if progress.version != membership.version or not progress.barrier:
        return Step.BARRIER
    if not progress.drained:
        return Step.DRAIN
    if not progress.streamed:
        return Step.STREAM
    return Step.FINISH
