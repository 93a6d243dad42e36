"""kvnode.replica.channel.wire: calls and replies through the codec and back, many to a frame, and truncated,
malformed or random frames refused with WireError. Pure: these run in-process and fast."""

from __future__ import annotations

import itertools
import random
import struct

import pytest

from kvnode.replica.channel import wire
from kvnode.replica.channel.wire import CallRequest, Op, ReplicaReply, Status, WireError
from kvnode.storage.records import Record, encode

ALL_BYTES = bytes(range(256))
MAX_U64 = 2**64 - 1
MAX_U32 = 2**32 - 1


CALLS = [
    CallRequest(0, Op.READ, b"k", b""),
    CallRequest(1, Op.WRITE, b"key", encode(Record.put(5, b"value"))),
    CallRequest(MAX_U32, Op.WRITE, ALL_BYTES, encode(Record.put(6, ALL_BYTES))),
    CallRequest(17, Op.READ, b"", b""),
    CallRequest(18, Op.WRITE, b"\n\x00", encode(Record.delete(9))),
    CallRequest(19, Op.WRITE, b"k" * 70_000, b"r" * 100_000),
]
REPLIES = [
    ReplicaReply(0, Status.FOUND, encode(Record.put(5, ALL_BYTES))),
    ReplicaReply(1, Status.ABSENT, b""),
    ReplicaReply(2, Status.NEWER, wire.encode_timestamp(MAX_U64)),
    ReplicaReply(3, Status.STORED, b""),
    ReplicaReply(5, Status.REFUSED, b"beyond the maximum clock skew"),
    ReplicaReply(MAX_U32, Status.FAILED, "corrupt record: é".encode()),
    ReplicaReply(4, Status.FOUND, b"x" * 200_000),
]


def _call_bytes(call: CallRequest) -> bytes:
    return wire.encode_call(call.call_id, call.op, call.key, call.record)


def _reply_bytes(reply: ReplicaReply) -> bytes:
    return wire.encode_reply(reply.call_id, reply.status, reply.payload)


@pytest.mark.parametrize("call", CALLS, ids=lambda call: f"{call.op.name}-{call.call_id}")
def test_wire_call_roundtrip(call: CallRequest) -> None:
    assert wire.decode_calls(_call_bytes(call)) == [call]


@pytest.mark.parametrize("reply", REPLIES, ids=lambda reply: f"{reply.status.name}-{reply.call_id}")
def test_wire_reply_roundtrip(reply: ReplicaReply) -> None:
    assert wire.decode_replies(_reply_bytes(reply)) == [reply]


def test_wire_read_call_without_a_record_argument() -> None:
    assert wire.decode_calls(wire.encode_call(3, Op.READ, b"k")) == [CallRequest(3, Op.READ, b"k", b"")]
    assert wire.decode_replies(wire.encode_reply(3, Status.ABSENT)) == [ReplicaReply(3, Status.ABSENT, b"")]


def test_wire_many_messages_in_one_frame() -> None:
    calls = CALLS * 3
    assert wire.decode_calls(b"".join(_call_bytes(call) for call in calls)) == calls
    replies = REPLIES * 3
    assert wire.decode_replies(b"".join(_reply_bytes(reply) for reply in replies)) == replies


def test_wire_empty_frame_has_no_messages() -> None:
    assert wire.decode_calls(b"") == []
    assert wire.decode_replies(b"") == []


def test_wire_timestamp_roundtrip() -> None:
    for timestamp in (0, 1, 1_700_000_000_000_000, MAX_U64):
        assert wire.decode_timestamp(wire.encode_timestamp(timestamp)) == timestamp
    for payload in (b"", b"\x00" * 7, b"\x00" * 9):
        with pytest.raises(WireError):
            wire.decode_timestamp(payload)


def _boundaries(messages: list[bytes]) -> set[int]:
    return set(itertools.accumulate((len(message) for message in messages), initial=0))


def test_wire_truncated_call_frames_raise_wire_error() -> None:
    messages = [_call_bytes(call) for call in CALLS[:5]]
    frame = b"".join(messages)
    boundaries = _boundaries(messages)
    for length in range(len(frame)):
        if length in boundaries:
            assert len(wire.decode_calls(frame[:length])) == sorted(boundaries).index(length)
        else:
            with pytest.raises(WireError):
                wire.decode_calls(frame[:length])


def test_wire_truncated_reply_frames_raise_wire_error() -> None:
    messages = [_reply_bytes(reply) for reply in REPLIES[:4]]
    frame = b"".join(messages)
    boundaries = _boundaries(messages)
    for length in range(len(frame)):
        if length in boundaries:
            assert len(wire.decode_replies(frame[:length])) == sorted(boundaries).index(length)
        else:
            with pytest.raises(WireError):
                wire.decode_replies(frame[:length])


def test_wire_malformed_messages_raise_wire_error() -> None:
    good_call = _call_bytes(CallRequest(1, Op.WRITE, b"key", b"rec"))
    bad_frames = [
        struct.pack(">IIBI", 9, 1, 99, 0),  # unknown op
        struct.pack(">IIBI", 9, 1, 0, 0),  # op 0
        struct.pack(">IIBI", 9, 1, 1, 1),  # key runs past its message
        struct.pack(">IIBI", 12, 1, 1, 5) + b"abc",  # key runs past its message, frame has the bytes
        struct.pack(">IIBI", 0, 1, 1, 0),  # length shorter than the header
        struct.pack(">I", 0),
        struct.pack(">I", MAX_U32) + b"\x00" * 9,  # length runs past the frame
        good_call + b"\x00",  # trailing byte after a good message
        good_call + good_call[:-1],
    ]
    for frame in bad_frames:
        with pytest.raises(WireError):
            wire.decode_calls(frame)
    bad_replies = [
        struct.pack(">IIB", 5, 1, 0),  # status 0
        struct.pack(">IIB", 5, 1, 99),  # unknown status
        struct.pack(">IIB", 4, 1, 1),  # length shorter than the header
        struct.pack(">IIB", 6, 1, 1),  # length runs past the frame
        _reply_bytes(REPLIES[1]) + b"\x00\x00",
    ]
    for frame in bad_replies:
        with pytest.raises(WireError):
            wire.decode_replies(frame)


def test_wire_garbage_decodes_or_raises_wire_error_only() -> None:
    rng = random.Random(11)
    outcomes = {"decoded": 0, "error": 0}
    for _ in range(20_000):
        length = rng.randrange(0, 40)
        if rng.random() < 0.5:
            # plausible lengths, so the decoders get past the framing and into the message fields
            body = rng.randbytes(length)
            data = struct.pack(">I", length) + body
        else:
            data = rng.randbytes(length)
        for decoder in (wire.decode_calls, wire.decode_replies):
            try:
                decoder(data)
            except WireError:
                outcomes["error"] += 1
            else:
                outcomes["decoded"] += 1
    assert outcomes["decoded"] > 0 and outcomes["error"] > 0


def test_frames_breaking_the_limits_are_refused() -> None:
    limits = wire.Limits(max_record=100, max_calls=3)
    read = wire.encode_call(1, wire.Op.READ, b"k")
    assert len(wire.decode_calls(read * 3, limits)) == 3
    for frame, reason in [
        (read * 4, "4 calls"),
        (wire.encode_call(1, wire.Op.READ, b""), "key of 0 bytes"),
        (wire.encode_call(1, wire.Op.READ, b"k" * (wire.MAX_KEY_BYTES + 1)), "key of"),
        (wire.encode_call(1, wire.Op.WRITE, b"k", b"r" * 101), "record of 101 bytes"),
    ]:
        with pytest.raises(wire.WireError, match=reason):
            wire.decode_calls(frame, limits)


def test_a_forward_carries_a_largest_record_and_its_owners_and_no_more() -> None:
    """A FORWARD's record is a write's plus the owners it goes to: up to MAX_FORWARD_HEADER bytes over
    the largest record, which no other call may send."""
    limits = wire.Limits(max_record=100)
    largest = wire.encode_call(1, wire.Op.FORWARD, b"k", b"r" * (100 + wire.MAX_FORWARD_HEADER))
    assert [call.op for call in wire.decode_calls(largest, limits)] == [wire.Op.FORWARD]
    assert limits.max_call >= len(largest) and limits.max_frame >= wire.FRAME_TARGET + len(largest)
    beyond = wire.encode_call(1, wire.Op.FORWARD, b"k", b"r" * (101 + wire.MAX_FORWARD_HEADER))
    as_a_write = wire.encode_call(1, wire.Op.WRITE, b"k", b"r" * (100 + wire.MAX_FORWARD_HEADER))
    for frame in (beyond, as_a_write):
        with pytest.raises(wire.WireError, match="record of"):
            wire.decode_calls(frame, limits)


def test_a_clock_call_has_no_key_and_its_answer_is_a_wall_clock() -> None:
    limits = wire.Limits(max_record=100)
    [call] = wire.decode_calls(wire.encode_call(5, wire.Op.CLOCK, b""), limits)
    assert (call.call_id, call.op, call.key, call.record) == (5, wire.Op.CLOCK, b"", b"")
    [reply] = wire.decode_replies(wire.encode_reply(5, wire.Status.CLOCK, wire.encode_timestamp(1_234)))
    assert (reply.status, wire.decode_timestamp(reply.payload)) == (wire.Status.CLOCK, 1_234)


def test_a_delete_travels_as_its_timestamp_and_replica_count() -> None:
    for tombstone in (Record.delete(MAX_U64), Record.delete(7, copies=2)):
        assert wire.decode_delete(wire.encode_delete(tombstone)) == tombstone
    for record in (b"", b"\x00" * 9, b"\x00" * 11):
        with pytest.raises(WireError, match="DELETE record"):
            wire.decode_delete(record)


def test_a_call_not_of_the_channels_protocol_version_is_an_unknown_op() -> None:
    frame = wire.encode_call(1, Op.DELETE, b"k", wire.encode_delete(Record.delete(7)))
    every_op = wire.Limits.for_body(1024)
    assert [call.op for call in wire.decode_calls(frame, every_op)] == [Op.DELETE]
    version_1 = wire.Limits(every_op.max_record, ops=frozenset(set(Op) - {Op.DELETE}))
    with pytest.raises(WireError, match="unknown op 11"):
        wire.decode_calls(frame, version_1)
