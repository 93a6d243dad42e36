"""kvnode.replica.answers: a reply resolves to what the protocol table says its status answers, and a
failed, mismatched or malformed reply to the named error, with the peer's URL in its message."""

from __future__ import annotations

import pytest

from kvnode.replica import wire
from kvnode.replica.answers import answer_of
from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaNotReady,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
)
from kvnode.storage.keyspace import DISK_FULL
from kvnode.storage.records import Record, encode

URL = "http://b:1"


def reply(status: wire.Status, payload: bytes = b"") -> wire.ReplicaReply:
    return wire.ReplicaReply(7, status, payload)


@pytest.mark.parametrize(
    ("op", "answer", "value"),
    [
        (wire.Op.READ, reply(wire.Status.FOUND, encode(Record(5, False, b"v"))), Record(5, False, b"v")),
        (wire.Op.FETCH, reply(wire.Status.ABSENT), None),
        (wire.Op.WRITE, reply(wire.Status.STORED), None),
        (wire.Op.WRITE, reply(wire.Status.NEWER, wire.encode_timestamp(42)), 42),
        (wire.Op.CLOCK, reply(wire.Status.CLOCK, wire.encode_clock(9, "serving")), (9, "serving")),
        (wire.Op.SCAN, reply(wire.Status.RECORDS, b"page"), b"page"),
    ],
)
def test_a_reply_resolves_to_what_its_status_answers(
    op: wire.Op, answer: wire.ReplicaReply, value: object
) -> None:
    assert answer_of(URL, op, answer) == (None, value)


@pytest.mark.parametrize(
    ("answer", "error", "text"),
    [
        (reply(wire.Status.FAILED, f"{DISK_FULL}: no room".encode()), ReplicaDiskFull, "disk full: no room"),
        (reply(wire.Status.FAILED, b"IO error"), ReplicaRejected, "IO error"),
        (reply(wire.Status.REFUSED, b"stamped too far ahead"), ReplicaSkewRefused, "stamped too far ahead"),
        (reply(wire.Status.NOT_READY), ReplicaNotReady, "not whole yet"),
    ],
)
def test_a_failed_reply_fails_any_call_with_its_named_error(
    answer: wire.ReplicaReply, error: type[ReplicaError], text: str
) -> None:
    for op in (wire.Op.READ, wire.Op.WRITE, wire.Op.LIST):
        failure, value = answer_of(URL, op, answer)
        assert type(failure) is error and value is None
        assert str(failure).startswith(f"{URL}: ") and text in str(failure), str(failure)


def test_a_status_that_does_not_answer_the_call_is_a_protocol_error() -> None:
    failure, value = answer_of(URL, wire.Op.READ, reply(wire.Status.STORED))
    assert isinstance(failure, ReplicaProtocolError) and value is None
    assert str(failure) == f"{URL}: reply STORED does not answer a READ"


def test_a_malformed_payload_is_a_protocol_error() -> None:
    failure, _ = answer_of(URL, wire.Op.READ, reply(wire.Status.FOUND, b"\xff not a record"))
    assert isinstance(failure, ReplicaProtocolError)
    assert str(failure).startswith(f"{URL}: malformed record in reply: ")
    failure, _ = answer_of(URL, wire.Op.WRITE, reply(wire.Status.NEWER, b"\x01"))
    assert isinstance(failure, ReplicaProtocolError)
    assert str(failure) == f"{URL}: timestamp payload is 1 bytes, expected 8"
