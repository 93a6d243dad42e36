"""kvnode.replica.channel.answerers: each call goes to the answerer registered for its op, in order; a call
no answerer takes, or one its answerer cannot answer, fails alone; a hook that fails after the frame fails
every call of it; one answerer an op, of the protocol's ops only; the frames and calls answered are
counted. A deferred answerer starts after the frame's hooks and answers later, through the channel's late
replies, which leave together and are dropped once the channel ends."""

from __future__ import annotations

import asyncio

import pytest

from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import (
    ANSWERED_FIGURES,
    Answer,
    Answerers,
    LateReplies,
    Reply,
    Unanswerable,
)
from kvnode.storage.keyspace import StorageError, StorageFull


def replies(answerers: Answerers, *calls: wire.CallRequest) -> list[wire.ReplicaReply]:
    return wire.decode_replies(b"".join(answerers.answer_frame(list(calls))))


def call(call_id: int, op: wire.Op, record: bytes = b"") -> wire.CallRequest:
    return wire.CallRequest(call_id, op, b"k", record)


def test_each_call_is_answered_by_its_op_s_answerer_in_order_and_the_others_fail_alone() -> None:
    answerers = Answerers()
    answerers.register(wire.Op.READ, lambda c: (wire.Status.FOUND, c.key))
    answerers.register(wire.Op.WRITE, lambda c: (wire.Status.STORED, b""))
    assert replies(answerers, call(1, wire.Op.WRITE), call(2, wire.Op.SCAN), call(3, wire.Op.READ)) == [
        (1, wire.Status.STORED, b""),
        (2, wire.Status.FAILED, b"this node answers no SCAN"),
        (3, wire.Status.FOUND, b"k"),
    ]
    assert wire.Op.SCAN in answerers.unanswered and wire.Op.READ not in answerers.unanswered
    replies(answerers, call(4, wire.Op.READ))
    assert ANSWERED_FIGURES.read(answerers).json() == {"frames": 2, "calls": 4}  # a failed call counts too


@pytest.mark.parametrize(
    "failure", [Unanswerable("not now"), ValueError("malformed"), StorageError("I/O error")]
)
def test_an_answerer_that_cannot_answer_fails_its_call_with_the_reason(failure: Exception) -> None:
    def refuse(request: wire.CallRequest) -> Answer:
        raise failure

    answerers = Answerers()
    answerers.register(wire.Op.READ, refuse)
    answerers.register(wire.Op.CLOCK, lambda c: (wire.Status.CLOCK, b"now"))
    assert replies(answerers, call(1, wire.Op.READ), call(2, wire.Op.CLOCK)) == [
        (1, wire.Status.FAILED, str(failure).encode()),
        (2, wire.Status.CLOCK, b"now"),
    ]


def test_the_hooks_run_after_the_frame_and_one_that_fails_fails_every_call_of_it() -> None:
    answerers, ran = Answerers(), []

    def write(request: wire.CallRequest) -> Answer:
        ran.append(request.call_id)
        return wire.Status.STORED, b""

    answerers.register(wire.Op.WRITE, write)

    def commit() -> None:
        ran.append(0)
        if len(ran) > 3:
            raise StorageFull("disk full: No space left on device")

    answerers.after_frame(commit)
    assert replies(answerers, call(1, wire.Op.WRITE)) == [(1, wire.Status.STORED, b"")]
    assert replies(answerers, call(2, wire.Op.WRITE), call(3, wire.Op.WRITE)) == [
        (2, wire.Status.FAILED, b"disk full: No space left on device"),
        (3, wire.Status.FAILED, b"disk full: No space left on device"),
    ]
    assert ran == [1, 0, 2, 3, 0]


def test_an_op_has_one_answerer() -> None:
    answerers = Answerers()
    answerers.register(wire.Op.READ, lambda c: (wire.Status.ABSENT, b""))
    with pytest.raises(ValueError, match="READ already has an answerer"):
        answerers.register(wire.Op.READ, lambda c: (wire.Status.ABSENT, b""))
    answerers.register_deferred(wire.Op.FORWARD, lambda c, reply: None)
    with pytest.raises(ValueError, match="FORWARD already has an answerer"):
        answerers.register(wire.Op.FORWARD, lambda c: (wire.Status.ABSENT, b""))


# --- answered after the frame -----------------------------------------------------------------------------


def test_a_deferred_call_starts_after_the_frames_hooks_and_its_reply_comes_late() -> None:
    answerers, ran = Answerers(), []
    late: list[bytes] = []
    held: list[Reply] = []

    def forward(request: wire.CallRequest, reply: Reply) -> None:
        ran.append(f"forward {request.call_id}")
        held.append(reply)

    answerers.register_deferred(wire.Op.FORWARD, forward)
    answerers.register(wire.Op.WRITE, lambda c: (wire.Status.STORED, b""))
    answerers.after_frame(lambda: ran.append("commit"))
    frame = answerers.answer_frame([call(1, wire.Op.FORWARD), call(2, wire.Op.WRITE)], late.append)
    assert wire.decode_replies(b"".join(frame)) == [(2, wire.Status.STORED, b"")]
    assert ran == ["commit", "forward 1"] and late == [] and wire.Op.FORWARD not in answerers.unanswered
    held[0](wire.Status.FORWARDED, b"outcomes")
    assert wire.decode_replies(b"".join(late)) == [(1, wire.Status.FORWARDED, b"outcomes")]
    answerers.answer_frame([call(3, wire.Op.WRITE)], late.append)  # nothing deferred stays behind
    assert ran == ["commit", "forward 1", "commit"]


def test_a_deferred_call_fails_when_it_cannot_start_its_frame_fails_or_no_late_reply_can_come() -> None:
    answerers, started = Answerers(), []
    late: list[bytes] = []

    def forward(request: wire.CallRequest, reply: Reply) -> None:
        if request.record == b"malformed":
            raise ValueError("a FORWARD that does not decode")
        started.append(request.call_id)

    failing = [False]

    def commit() -> None:
        if failing[0]:
            raise StorageError("I/O error")

    answerers.register_deferred(wire.Op.FORWARD, forward)
    answerers.after_frame(commit)
    assert answerers.answer_frame([call(1, wire.Op.FORWARD, b"malformed")], late.append) == [b""]
    assert wire.decode_replies(b"".join(late)) == [(1, wire.Status.FAILED, b"a FORWARD that does not decode")]
    assert replies(answerers, call(2, wire.Op.FORWARD)) == [
        (2, wire.Status.FAILED, b"this channel answers no call after its frame")
    ]
    failing[0] = True
    frame = answerers.answer_frame([call(3, wire.Op.FORWARD)], late.append)
    assert wire.decode_replies(b"".join(frame)) == [(3, wire.Status.FAILED, b"I/O error")]
    failing[0] = False
    answerers.answer_frame([call(4, wire.Op.FORWARD)], late.append)
    assert started == [4]  # the failed frame's deferred call was never started


async def test_late_replies_told_in_one_turn_leave_together_and_are_dropped_once_the_channel_ends() -> None:
    sent: list[list[bytes]] = []
    sending = asyncio.Event()

    async def send(replies: list[bytes]) -> None:
        sent.append(replies)
        sending.set()
        await asyncio.sleep(0)

    late = LateReplies(send)
    late(b"one")
    late(b"two")
    await sending.wait()
    assert sent == [[b"one", b"two"]]
    late(b"three")  # while the first send is under way: the next frame
    for _ in range(5):
        await asyncio.sleep(0)
    assert sent == [[b"one", b"two"], [b"three"]]
    await late.close()
    late(b"after")
    await asyncio.sleep(0)
    assert sent == [[b"one", b"two"], [b"three"]]


async def test_late_replies_whose_channel_broke_are_dropped() -> None:
    tried: list[list[bytes]] = []

    async def broken(replies: list[bytes]) -> None:
        tried.append(replies)
        raise ConnectionResetError("gone")

    late = LateReplies(broken)
    late(b"one")
    for _ in range(3):
        await asyncio.sleep(0)
    late(b"two")  # dropped with its send, not sent again; the channel's end is the server's to say (close)
    for _ in range(3):
        await asyncio.sleep(0)
    await late.close()
    assert tried == [[b"one"], [b"two"]]
