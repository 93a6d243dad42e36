"""kvnode.records: the codec, the order that decides which version wins, and corrupt input. Pure: these
run in-process and fast."""

from __future__ import annotations

import itertools
import random
import struct

import pytest

from kvnode.records import CorruptRecord, Record, check, decode, encode, newest

ALL_BYTES = bytes(range(256))
MAX_U64 = 2**64 - 1


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
