"""Unit tests of the pure codecs and rules under the request path: records, the write clock, the wire.

kvnode.records, kvnode.clock and kvnode.wire do no I/O, so these run in-process and fast.
"""

from __future__ import annotations

import itertools
import random
import struct

import pytest

from kvnode.records import CorruptRecord, Record, check, decode, encode, newest
from kvnode.replica import wire
from kvnode.replica.wire import CallRequest, Op, ReplicaReply, Status, WireError

ALL_BYTES = bytes(range(256))
MAX_U64 = 2**64 - 1
MAX_U32 = 2**32 - 1


# --- records: codec ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        Record.put(0, b""),
        Record.put(1, b"v"),
        Record.put(1_700_000_000_000_000, b"hello world"),
        Record.put(MAX_U64, b"\x00" * 1000),
        Record.put(42, ALL_BYTES),
        Record.put(42, ALL_BYTES * 4096),  # 1 MiB
        Record.delete(0),
        Record.delete(7),
        Record.delete(MAX_U64),
    ],
    ids=lambda record: f"ts={record.timestamp},tomb={record.tombstone},len={len(record.value)}",
)
def test_record_roundtrip(record: Record) -> None:
    data = encode(record)
    assert isinstance(data, bytes)
    assert decode(data) == record


def test_record_roundtrip_keeps_every_byte_value() -> None:
    for byte in range(256):
        for value in (bytes([byte]), bytes([byte]) * 3, b"a" + bytes([byte]) + b"z"):
            assert decode(encode(Record.put(byte, value))) == Record(byte, False, value)
    assert decode(encode(Record.put(5, ALL_BYTES))).value == ALL_BYTES
    assert decode(encode(Record.put(5, ALL_BYTES[::-1]))).value == ALL_BYTES[::-1]


def test_record_roundtrip_value_that_looks_like_a_header() -> None:
    header_like = encode(Record.delete(99)) + encode(Record.put(3, b"x"))
    assert decode(encode(Record.put(1, header_like))) == Record.put(1, header_like)


def test_record_constructors() -> None:
    assert Record.put(3, b"v") == Record(timestamp=3, tombstone=False, value=b"v")
    assert Record.delete(3) == Record(timestamp=3, tombstone=True, value=b"")


# --- records: ordering ------------------------------------------------------------------------------


def test_newer_timestamp_wins_over_value_and_tombstone() -> None:
    assert newest([Record.put(1, b"zzz"), Record.put(2, b"a")]) == Record.put(2, b"a")
    assert newest([Record.put(2, b"a"), Record.put(1, b"zzz")]) == Record.put(2, b"a")
    # a newer tombstone wins over an older value, and a newer value over an older tombstone
    assert newest([Record.put(1, b"v"), Record.delete(2)]) == Record.delete(2)
    assert newest([Record.delete(1), Record.put(2, b"")]) == Record.put(2, b"")
    # the timestamp decides before anything else, even at the u64 extremes
    assert newest([Record.delete(MAX_U64 - 1), Record.put(MAX_U64, b"")]) == Record.put(MAX_U64, b"")
    assert Record.put(1, b"\xff" * 100) < Record.put(2, b"")


def test_tombstone_wins_a_tie() -> None:
    for value in (b"", b"a", b"\xff" * 64):
        value_record, tombstone = Record.put(5, value), Record.delete(5)
        assert value_record < tombstone
        assert newest([value_record, tombstone]) == tombstone
        assert newest([tombstone, value_record]) == tombstone


def test_greater_bytes_win_a_tie_between_values() -> None:
    cases = [
        (b"a", b"b"),
        (b"", b"\x00"),  # a prefix loses to its extension
        (b"a", b"a\x00"),
        (b"\x7f", b"\x80"),  # unsigned byte comparison
        (b"\xfe\xff", b"\xff"),
        (b"Z", b"a"),
    ]
    for smaller, greater in cases:
        assert Record.put(9, smaller) < Record.put(9, greater), (smaller, greater)
        assert newest([Record.put(9, smaller), Record.put(9, greater)]) == Record.put(9, greater)
        assert newest([Record.put(9, greater), Record.put(9, smaller)]) == Record.put(9, greater)


def test_newest_is_independent_of_answer_order() -> None:
    records: list[Record | None] = [
        Record.put(3, b"b"),
        Record.put(3, b"a"),
        Record.put(2, b"zz"),
        Record.delete(1),
        None,
        Record.put(3, b"ab"),
    ]
    winners = {newest(order) for order in itertools.permutations(records)}
    assert winners == {Record.put(3, b"b")}
    records.append(Record.delete(3))
    assert {newest(order) for order in itertools.permutations(records, len(records))} == {Record.delete(3)}


def test_newest_of_nothing_is_none() -> None:
    assert newest([]) is None
    assert newest([None]) is None
    assert newest([None, None, None]) is None
    assert newest(iter([None, Record.put(1, b"x"), None])) == Record.put(1, b"x")


def test_encoding_does_not_change_the_order() -> None:
    rng = random.Random(20261121)
    records = [
        Record(rng.choice([0, 1, 2, MAX_U64]), rng.random() < 0.3, b"")
        if rng.random() < 0.3
        else Record.put(rng.choice([0, 1, 2, MAX_U64]), rng.randbytes(rng.randrange(3)))
        for _ in range(200)
    ]
    decoded = [decode(encode(record)) for record in records]
    assert sorted(decoded) == sorted(records)
    assert newest(decoded) == newest(records)


# --- records: corrupt input -------------------------------------------------------------------------


def test_input_shorter_than_the_header_is_corrupt() -> None:
    full = encode(Record.put(123456, b"value"))
    for length in range(9):
        with pytest.raises(CorruptRecord):
            decode(full[:length])
    with pytest.raises(CorruptRecord):
        decode(b"")


def test_truncated_tombstone_is_corrupt() -> None:
    data = encode(Record.delete(77))
    for length in range(len(data)):
        with pytest.raises(CorruptRecord):
            decode(data[:length])


def test_unknown_flags_are_corrupt() -> None:
    for flags in range(2, 256):
        data = struct.pack(">QB", 5, flags) + b"v"
        with pytest.raises(CorruptRecord):
            decode(data)
        with pytest.raises(CorruptRecord):
            decode(data[:9])


def test_tombstone_with_a_value_is_corrupt() -> None:
    for extra in (b"\x00", b"v", ALL_BYTES):
        with pytest.raises(CorruptRecord):
            decode(encode(Record.delete(5)) + extra)


def test_garbage_decodes_or_raises_corrupt_record_only() -> None:
    rng = random.Random(7)
    decoded = corrupt = 0
    for _ in range(20_000):
        data = rng.randbytes(rng.randrange(0, 24))
        try:
            record = decode(data)
        except CorruptRecord:
            corrupt += 1
            with pytest.raises(CorruptRecord):
                check(data)  # check refuses exactly what decode refuses
        else:
            decoded += 1
            assert encode(record) == data  # whatever decodes is exactly what the codec writes
            assert check(data) is data
    assert decoded > 0 and corrupt > 0


# --- wire ---------------------------------------------------------------------------------------------


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
        struct.pack(">IIBI", 9, 1, 3, 0),  # unknown op
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
