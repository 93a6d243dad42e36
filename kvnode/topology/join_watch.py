"""When a claimed join that never comes is undone (pure: the caller looks, and says what it saw and when).

A node that claims a join (the membership has it ``joining``) and dies before it takes part would leave
the cluster with a member joining for good, and one change at a time would refuse every later change. So
the claimant (the member that orders changes) watches a member joining: at each look it says whether it
heard from it (kvnode.cluster.join_watcher: its replica channel to it is open, or opens within the look),
and once it has heard nothing for the join timeout the join is undone
(kvnode.topology.membership.Membership.undone). A joiner that streams, however slowly, answers its
channel, so it is heard at every look; only one that neither answers nor accepts a connection for the
whole timeout is taken for gone.

Time is not trusted: only this node's monotonic clock measures the silence, and only across looks close
enough together. A gap between two looks longer than ``max_gap_s`` (this node was not looking: its loop
stalled, or it was suspended) starts the silence over, so a pause of the claimant is never counted as
the joiner's. The watch is kept in memory only: a claimant started again after a crash starts over, and
undoes the join later than it would have, never sooner.

>>> joining = Membership.seeded(["http://a:1", "http://b:1"]).with_joining("http://c:1")
>>> watch = watch_for(joining, "http://a:1", None)
>>> for now in (0.0, 1.0, 2.0, 3.0):  # nothing heard at these looks
...     watch = watch.looked(heard=False, now=now, max_gap_s=5.0)
...     print(now, verdict(watch, timeout_s=3.0).value)
0.0 look
1.0 look
2.0 look
3.0 undo
>>> watch_for(joining, "http://b:1", None) is None  # only the claimant watches
True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from kvnode.topology.membership import Membership

__all__ = ["Verdict", "Watch", "verdict", "watch_for"]


class Verdict(enum.Enum):
    NONE = "none"  # nothing to watch here: no member joins, or this node is not the claimant
    LOOK = "look"  # heard from lately, or silent for less than the timeout: look again
    UNDO = "undo"  # silent for the join timeout: undo its join


@dataclass(frozen=True, slots=True)
class Watch:
    """What the claimant saw of the member joining under one membership version, by its monotonic clock:
    its last look, and since which look it has heard nothing (None: it heard from it at the last one)."""

    version: int
    member: str
    last_look: float | None = None
    silent_since: float | None = None

    def looked(self, heard: bool, now: float, max_gap_s: float) -> Watch:
        """The watch after a look at ``now`` that heard from the member or not."""
        if heard:
            return replace(self, last_look=now, silent_since=None)
        watched = self.last_look is not None and 0 <= now - self.last_look <= max_gap_s
        silent_since = self.silent_since if watched and self.silent_since is not None else now
        return replace(self, last_look=now, silent_since=silent_since)

    @property
    def silent_for(self) -> float:
        """Seconds from the first look that heard nothing to the last, with no look between that heard."""
        if self.silent_since is None or self.last_look is None:
            return 0.0
        return self.last_look - self.silent_since


def watch_for(membership: Membership, own: str, watch: Watch | None) -> Watch | None:
    """The watch this node keeps running with ``membership``: ``watch`` while it is of this version, a new
    one when a member joins in another, None when none joins or this node is not the claimant."""
    if not membership.joining or membership.claimant != own:
        return None
    if watch is not None and watch.version == membership.version:
        return watch
    [member] = membership.joining
    return Watch(membership.version, member)


def verdict(watch: Watch | None, timeout_s: float) -> Verdict:
    if watch is None:
        return Verdict.NONE
    return Verdict.UNDO if watch.silent_for >= timeout_s else Verdict.LOOK
