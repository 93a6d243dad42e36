"""kvnode.cluster.membership_calls: MEMBERSHIP answers the membership the node runs with; ADOPT runs with
a newer one offered, takes the same one again as done (a change resumed after a crash), and fails with the
reason a membership is not adopted."""

from __future__ import annotations

from typing import cast

from kvnode.cluster.members import Members, NotAdopted
from kvnode.cluster.membership_calls import MembershipCalls
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.topology.membership import Membership

A, B, C = "http://a:1", "http://b:1", "http://c:1"


class RecordingMembers:
    """What the answers use of Members: the membership it runs with, and adopt (which refuses an older
    version, as Members.adopt does)."""

    def __init__(self, membership: Membership) -> None:
        self.membership = membership
        self.adopted: list[Membership] = []

    def adopt(self, offered: Membership) -> None:
        if offered.version <= self.membership.version:
            raise NotAdopted(
                f"version {offered.version} is not newer than this node's {self.membership.version}"
            )
        self.adopted.append(offered)
        self.membership = offered


def answered(calls: Answerers, op: wire.Op, record: bytes = b"") -> wire.ReplicaReply:
    (reply,) = wire.decode_replies(b"".join(calls.answer_frame([wire.CallRequest(1, op, b"", record)])))
    return reply


def test_membership_and_adopt_are_answered_from_the_members() -> None:
    current = Membership.seeded((A, B))
    members, calls = RecordingMembers(current), Answerers()
    MembershipCalls(cast(Members, members)).register(calls)
    assert answered(calls, wire.Op.MEMBERSHIP) == (1, wire.Status.MEMBERSHIP, current.encode())

    assert answered(calls, wire.Op.ADOPT, current.encode()) == (1, wire.Status.STORED, b"")  # the same again
    assert members.adopted == []
    joined = current.with_joining(C)
    assert answered(calls, wire.Op.ADOPT, joined.encode()) == (1, wire.Status.STORED, b"")
    assert members.adopted == [joined]
    assert answered(calls, wire.Op.MEMBERSHIP) == (1, wire.Status.MEMBERSHIP, joined.encode())


def test_a_membership_not_adopted_fails_the_call_with_why() -> None:
    current = Membership.seeded((A, B))
    members, calls = RecordingMembers(current), Answerers()
    MembershipCalls(cast(Members, members)).register(calls)
    older = Membership.seeded((A, B, C))  # version 1 again, another membership: not newer
    reply = answered(calls, wire.Op.ADOPT, older.encode())
    assert (reply.status, reply.payload) == (wire.Status.FAILED, b"version 1 is not newer than this node's 1")
