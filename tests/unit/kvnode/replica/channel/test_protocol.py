"""kvnode.replica.channel.protocol: the version two ends agree on (the highest both speak, or a refusal), what
a node speaks when pinned, the ops each version carries, and how a write travels at each version; the table
answers every op only with the statuses that carry an answer (the failing ones fail any call), and each
resolves what the server encodes for it; a reply resolves to what its row says its status answers, and a
failed, mismatched or malformed reply to the named error, with the peer's URL in its message. Pure."""

from __future__ import annotations

import pytest

from kvnode.replica.channel import wire
from kvnode.replica.channel.protocol import (
    CURRENT_VERSION,
    MIN_VERSION,
    PROTOCOL,
    Versions,
    negotiate,
    ops_of,
    resolve,
    spoken,
    write_call,
)
from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaNotReady,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
)
from kvnode.storage.keyspace import DISK_FULL
from kvnode.storage.records import Record, decode, encode

FAILING = {wire.Status.FAILED, wire.Status.REFUSED, wire.Status.NOT_READY}


@pytest.mark.parametrize(
    ("ours", "theirs", "agreed"),
    [
        (Versions(1, 2), Versions(1, 2), 2),  # two upgraded nodes
        (Versions(1, 2), Versions(1, 1), 1),  # beside one not yet upgraded (or pinned)
        (Versions(1, 1), Versions(1, 2), 1),
        (Versions(1, 3), Versions(2, 5), 3),
        (Versions(2, 2), Versions(2, 3), 2),
        (Versions(3, 3), Versions(1, 3), 3),
        (Versions(2, 2), Versions(1, 1), None),  # a node that dropped 1, beside one that speaks only 1
        (Versions(1, 1), Versions(2, 3), None),
        (Versions(4, 6), Versions(1, 3), None),
    ],
)
def test_two_ends_use_the_highest_version_both_speak_or_none(
    ours: Versions, theirs: Versions, agreed: int | None
) -> None:
    assert negotiate(ours, theirs) == agreed
    assert negotiate(theirs, ours) == agreed  # both ends reach the same answer on their own


def test_a_node_speaks_every_version_unless_pinned_below_the_newest() -> None:
    assert spoken() == spoken(0) == Versions(MIN_VERSION, CURRENT_VERSION)
    assert spoken(1) == Versions(MIN_VERSION, 1)
    for outside in (-1, CURRENT_VERSION + 1):
        with pytest.raises(ValueError, match="maximum protocol version"):
            spoken(outside)


def test_each_version_has_the_ops_of_the_one_before_and_the_current_one_has_them_all() -> None:
    paxos = {wire.Op.PREPARE, wire.Op.PROPOSE, wire.Op.COMMIT}
    forward = {wire.Op.FORWARD}
    assert ops_of(1) == set(wire.Op) - {wire.Op.DELETE} - paxos - forward
    assert ops_of(2) == ops_of(3) == set(wire.Op) - paxos - forward
    assert ops_of(4) == set(wire.Op) - forward
    assert ops_of(CURRENT_VERSION) == set(wire.Op) == set(PROTOCOL)


def test_a_tombstone_travels_as_a_delete_from_version_2_and_anything_else_as_a_write() -> None:
    tombstone = Record.delete(7, copies=2)
    op, key, record = write_call(b"k", tombstone, 1)
    assert (op, key, decode(record)) == (wire.Op.WRITE, b"k", tombstone)
    op, key, record = write_call(b"k", tombstone, 2)
    assert (op, key, wire.decode_delete(record)) == (wire.Op.DELETE, b"k", tombstone)
    for version in (1, 2):
        for other in (Record.put(7, b"v"), Record.put(7, b"v", ttl_us=5)):
            op, _, record = write_call(b"k", other, version)
            assert (op, decode(record)) == (wire.Op.WRITE, other)
    # Not tombstones as Record.delete makes them (a value, an expiry): what they hold travels whole.
    for odd in (Record(7, True, b"v"), Record(7, True, b"", 9)):
        op, _, record = write_call(b"k", odd, 2)
        assert (op, record) == (wire.Op.WRITE, encode(odd))


def test_a_write_travels_as_the_bytes_its_caller_encoded_and_a_tombstone_as_a_delete_still() -> None:
    given = b"the record's bytes, encoded once by the coordinator"
    assert write_call(b"k", Record.put(7, b"v"), 2, given) == (wire.Op.WRITE, b"k", given)
    tombstone = Record.delete(7)
    assert write_call(b"k", tombstone, 1, given) == (wire.Op.WRITE, b"k", given)
    assert write_call(b"k", tombstone, 2, given) == (wire.Op.DELETE, b"k", wire.encode_delete(tombstone))


def test_every_op_has_an_entry_and_no_entry_answers_with_a_failing_status() -> None:
    assert set(PROTOCOL) == set(wire.Op)
    for op, call in PROTOCOL.items():
        assert call.answers, op
        assert not FAILING & set(call.answers), op


def test_each_answer_resolves_what_the_server_encodes() -> None:
    record = Record(5, False, b"v")
    for op in (wire.Op.READ, wire.Op.FETCH):
        assert PROTOCOL[op].answers[wire.Status.FOUND](encode(record)) == record
        assert PROTOCOL[op].answers[wire.Status.ABSENT](b"") is None
    assert PROTOCOL[wire.Op.WRITE].answers[wire.Status.NEWER](wire.encode_timestamp(42)) == 42
    assert PROTOCOL[wire.Op.WRITE].answers[wire.Status.STORED](b"") is None
    assert PROTOCOL[wire.Op.CLOCK].answers[wire.Status.CLOCK](wire.encode_clock(9, "serving")) == (
        9,
        "serving",
    )
    assert PROTOCOL[wire.Op.ADOPT].answers[wire.Status.STORED](b"") is None
    # The repair, membership and scan calls hand their payloads on, decoded by their callers.
    for op, status in [
        (wire.Op.BRANCHES, wire.Status.HASHES),
        (wire.Op.SEGMENTS, wire.Status.HASHES),
        (wire.Op.LIST, wire.Status.LISTING),
        (wire.Op.MEMBERSHIP, wire.Status.MEMBERSHIP),
        (wire.Op.SCAN, wire.Status.RECORDS),
    ]:
        assert PROTOCOL[op].answers[status](b"payload") == b"payload"


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
    assert resolve(URL, op, answer) == (None, value)


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
        failure, value = resolve(URL, op, answer)
        assert type(failure) is error and value is None
        assert str(failure).startswith(f"{URL}: ") and text in str(failure), str(failure)


def test_a_status_that_does_not_answer_the_call_is_a_protocol_error() -> None:
    failure, value = resolve(URL, wire.Op.READ, reply(wire.Status.STORED))
    assert isinstance(failure, ReplicaProtocolError) and value is None
    assert str(failure) == f"{URL}: reply STORED does not answer a READ"


def test_a_malformed_payload_is_a_protocol_error() -> None:
    failure, _ = resolve(URL, wire.Op.READ, reply(wire.Status.FOUND, b"\xff not a record"))
    assert isinstance(failure, ReplicaProtocolError)
    assert str(failure).startswith(f"{URL}: malformed record in reply: ")
    failure, _ = resolve(URL, wire.Op.WRITE, reply(wire.Status.NEWER, b"\x01"))
    assert isinstance(failure, ReplicaProtocolError)
    assert str(failure) == f"{URL}: timestamp payload is 1 bytes, expected 8"
