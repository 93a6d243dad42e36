"""One membership epoch: what a node runs with between two membership changes, as one immutable value (the
membership, where keys are written and where they are read, the other members' channels, since when).
kvnode.cluster.members makes one for each membership the node runs with and hands it to every part that
depends on the membership, each through the same ``use(epoch)``; nothing else tells a part of a change.

Generic in what a peer is (``P``), so that this layer knows nothing of channels: a part states what it
needs of a peer (a replica, something whose clock can be measured) and takes an ``Epoch`` of that.

>>> epoch = Epoch("http://a", Membership.seeded(["http://a", "http://b"]), {"http://b": "b's channel"}, 7)
>>> epoch.placement.nodes, list(epoch.peers), epoch.settled_since, epoch.read_placement is None
(('http://a', 'http://b'), ['http://b'], 7, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kvnode.topology.membership import Membership
from kvnode.topology.placement import Placement

__all__ = ["Epoch"]

P = TypeVar("P", covariant=True)


@dataclass(frozen=True)
class Epoch(Generic[P]):
    own_url: str
    membership: Membership
    peers: Mapping[str, P]  # every other member's channel, by URL, in the membership's order
    since: int  # the hybrid clock's time when this node began to run with it
    # Where keys are written (members joining included), and where they are read if not there; both list
    # a key's owners in this node's datacenter first.
    placement: Placement = field(init=False)
    read_placement: Placement | None = field(init=False)

    def __post_init__(self) -> None:
        home = self.datacenter
        object.__setattr__(self, "placement", self.membership.placement(home))
        object.__setattr__(self, "read_placement", self.membership.read_placement(home))

    @property
    def datacenter(self) -> str:
        """This node's datacenter, whose owners its placements list first ("" while it is no member)."""
        return self.membership.home_of(self.own_url)

    @property
    def settled_since(self) -> int | None:
        """Since when no change has been under way (a member joining or leaving, a new replication
        factor); None while one is."""
        return None if self.membership.changing else self.since
