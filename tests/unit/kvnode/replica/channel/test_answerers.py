"""kvnode.replica.channel.answerers: each call goes to the answerer registered for its op, in order; a call
no answerer takes, or one its answerer cannot answer, fails alone; a hook that fails after the frame fails
every call of it; one answerer an op, of the protocol's ops only; the frames and calls answered are
counted."""

from __future__ import annotations

import pytest

from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import ANSWERED_FIGURES, Answer, Answerers, Unanswerable
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
