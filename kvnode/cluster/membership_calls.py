"""The replica calls about the membership answered by this node (ops MEMBERSHIP and ADOPT): the membership
it runs with, and a newer one a peer offers it; registered with the channel's server end
(kvnode.replica.channel.answerers) when the node is wired. The caller's end is kvnode.cluster.members
(fetching a newer membership, offering one) and the membership changes."""

from __future__ import annotations

from kvnode.cluster.members import Members, NotAdopted
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answer, Answerers, Unanswerable
from kvnode.topology.membership import Membership

__all__ = ["MembershipCalls"]

_STORED: Answer = (wire.Status.STORED, b"")


class MembershipCalls:
    """How this node answers a peer's membership calls, from the membership it runs with (``members``)."""

    __slots__ = ("_members",)

    def __init__(self, members: Members) -> None:
        self._members = members

    def register(self, answerers: Answerers) -> None:
        answerers.register(wire.Op.MEMBERSHIP, self.membership)
        answerers.register(wire.Op.ADOPT, self.adopt)

    def membership(self, call: wire.CallRequest) -> Answer:
        return wire.Status.MEMBERSHIP, self._members.membership.encode()

    def adopt(self, call: wire.CallRequest) -> Answer:
        """Run with the membership offered; the one this node runs with again is a change resumed after a
        crash, answered as taken."""
        offered = Membership.decode(call.record)
        if offered != self._members.membership:
            try:
                self._members.adopt(offered)
            except NotAdopted as refusal:
                raise Unanswerable(str(refusal)) from refusal
        return _STORED
