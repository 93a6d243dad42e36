"""What taking a newer membership means for a node (pure), as raft's ``Ready``: :func:`adoption` judges a
membership offered to it (by a peer, or by a change it makes) against the one it runs with, and says what
to do; kvnode.cluster.members does it, in this order: store the version (before it takes effect, so a node
that crashes then restarts with it), run with it (one new epoch handed to every part), open a channel to
each member new to it, close the channels of the members no longer in it (first telling a joiner whose
join it undoes, so that it ends its part), and keep the line that names a join undone.

A version without this node (it left, or its join was undone) is only stored: the node takes no further
part, and a restart is refused.

>>> running = Membership.seeded(["http://a:1", "http://b:1"]).with_joining("http://c:1")
>>> undo = adoption(running, running.undone("http://c:1"), "http://a:1", why="no progress for 300 s")
>>> undo.member, undo.opened, undo.closed, undo.told
(True, (), ('http://c:1',), ('http://c:1',))
>>> undo.undone
'join of http://c:1 undone: no progress for 300 s (membership version 3)'
>>> adoption(running, running.undone("http://c:1"), "http://c:1").member  # the joiner, told
False
"""

from __future__ import annotations

from dataclasses import dataclass

from kvnode.topology.membership import Membership

__all__ = ["Adoption", "NotAdopted", "adoption"]


class NotAdopted(Exception):
    """A membership offered to this node that it does not take; the message says why."""


@dataclass(frozen=True, slots=True)
class Adoption:
    """What a node does to run with ``membership``: whether it is a ``member`` of it (False: it only stores
    it), the members new to it (``opened``), those no longer in it (``closed``), of those the joiner whose
    join it undoes (``told`` first), and the line naming that join undone ("" when none is)."""

    membership: Membership
    member: bool
    opened: tuple[str, ...] = ()
    closed: tuple[str, ...] = ()
    told: tuple[str, ...] = ()
    undone: str = ""


def adoption(current: Membership, offered: Membership, own: str, why: str = "") -> Adoption:
    """What node ``own``, running with ``current``, does with ``offered``; ``why``: the reason a join it
    undoes was undone, when this node made the undo. Raises NotAdopted when it is of another cluster, not
    newer than ``current``, or leaves out this node as a member like the others (removed, or replaced)."""
    if offered.cluster != current.cluster:
        raise NotAdopted("it is another cluster's membership")
    if offered.version <= current.version:
        raise NotAdopted(f"version {offered.version} is not newer than this node's {current.version}")
    if own not in offered.urls:
        if own in current.leaving | current.joining:
            return Adoption(offered, member=False)
        raise NotAdopted(
            f"this node ({own}) is not a member of version {offered.version}: it was removed or replaced; "
            "stop it, and wipe its data dir before it joins again"
        )
    closed = tuple(url for url in current.urls if url not in offered.urls)
    told = tuple(url for url in closed if url in current.joining)
    reason = f": {why}" if why else ""
    undone = [f"join of {url} undone{reason} (membership version {offered.version})" for url in told]
    opened = tuple(url for url in offered.urls if url not in current.urls)
    return Adoption(offered, member=True, opened=opened, closed=closed, told=told, undone="".join(undone))
