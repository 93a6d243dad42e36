"""kvnode.storage.records: the codec, the order that decides which version wins, and corrupt input. Pure:
these
run in-process and fast."""

from __future__ import annotations

import itertools
import random
import struct

import pytest

from kvnode.storage.records import CorruptRecord, Record, check, decode, encode, newest

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
    assert Record.put(3, b"v") == Record(timestamp=3, tombstone=False, value=b"v", expires=0)
    assert Record.delete(3) == Record(timestamp=3, tombstone=True, value=b"", expires=0)
    assert Record.put(3, b"v", ttl_us=7) == Record(timestamp=3, tombstone=False, value=b"v", expires=10)


@pytest.mark.parametrize(
    "record",
    [
        Record.put(0, b"", ttl_us=1),
        Record.put(1_700_000_000_000_000, b"hello", ttl_us=1_000_000),
        Record.put(MAX_U64 - 1, ALL_BYTES, ttl_us=1),
        Record.put(5, encode(Record.delete(9)), ttl_us=3),  # a value that looks like a header
    ],
    ids=lambda record: f"ts={record.timestamp},expires={record.expires},len={len(record.value)}",
)
def test_record_with_an_expiry_roundtrips(record: Record) -> None:
    data = encode(record)
    assert data == struct.pack(">QBQ", record.timestamp, 0x02, record.expires) + record.value
    assert decode(data) == record
    assert check(data) is data


def test_records_without_a_ttl_keep_the_layout_from_before_ttls() -> None:
    # data dirs, hints and peers written before TTLs existed hold exactly these bytes
    assert encode(Record.put(0x0102030405060708, b"v")) == bytes.fromhex("0102030405060708") + b"\x00v"
    assert encode(Record.delete(1)) == bytes.fromhex("0000000000000001") + b"\x01"
    assert decode(bytes.fromhex("0000000000000002") + b"\x00xyz") == Record.put(2, b"xyz")


# --- records: expiry --------------------------------------------------------------------------------


def test_expiry_is_judged_against_the_write_timestamp_plus_the_ttl() -> None:
    record = Record.put(1_000, b"v", ttl_us=500)
    assert [record.expired_at(now) for now in (0, 1_000, 1_499, 1_500, MAX_U64)] == [
        False, False, False, True, True,
    ]  # fmt: skip
    assert record.absent_at(1_499) is False and record.absent_at(1_500) is True


def test_a_permanent_value_never_expires_and_a_tombstone_is_always_absent() -> None:
    for now in (0, 1, MAX_U64):
        assert not Record.put(5, b"v").expired_at(now) and not Record.put(5, b"v").absent_at(now)
        assert not Record.delete(5).expired_at(now) and Record.delete(5).absent_at(now)


def test_restamped_counts_the_ttl_from_the_new_timestamp() -> None:
    assert Record.put(10, b"v", ttl_us=5).restamped(100) == Record.put(100, b"v", ttl_us=5)
    assert Record.put(10, b"v").restamped(100) == Record.put(100, b"v")  # permanent stays permanent
    assert Record.delete(10).restamped(100) == Record.delete(100)


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


def test_an_expiring_version_orders_by_its_timestamp_first() -> None:
    expiring = Record.put(5, b"v", ttl_us=1)  # expired from 6 on, and still a version of time 5
    assert Record.put(4, b"zzz") < expiring < Record.put(6, b"")
    assert newest([Record.put(4, b"old"), expiring]) == expiring  # it hides the older value
    assert newest([expiring, Record.put(6, b"new")]) == Record.put(6, b"new")  # a later PUT wins
    assert newest([expiring, Record.delete(6)]) == Record.delete(6)  # and so does a later DELETE


def test_a_tie_at_one_timestamp_is_decided_the_same_way_with_expiries() -> None:
    # a tombstone, then the greater bytes, then an expiring version over a permanent one, the later first
    assert Record.put(5, b"z", ttl_us=9) < Record.delete(5)
    assert Record.put(5, b"a", ttl_us=9) < Record.put(5, b"b")
    assert Record.put(5, b"a") < Record.put(5, b"a", ttl_us=1) < Record.put(5, b"a", ttl_us=2)
    versions = [Record.put(5, b"a", ttl_us=2), Record.put(5, b"a"), Record.put(5, b"a", ttl_us=1)]
    assert {newest(order) for order in itertools.permutations(versions)} == {versions[0]}


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
        Record.delete(rng.choice([0, 1, 2, MAX_U64]))
        if rng.random() < 0.2
        else Record.put(rng.choice([0, 1, 2, MAX_U64 - 3]), rng.randbytes(rng.randrange(3)), ttl_us=ttl)
        for ttl in rng.choices([0, 0, 1, 3], k=300)
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
    for flags in range(4, 256):
        data = struct.pack(">QB", 5, flags) + b"v"
        with pytest.raises(CorruptRecord):
            decode(data)
        with pytest.raises(CorruptRecord):
            decode(data[:9])


def test_a_truncated_expiry_is_corrupt() -> None:
    data = encode(Record.put(5, b"", ttl_us=1))
    assert len(data) == 17
    for length in range(9, 17):
        with pytest.raises(CorruptRecord, match="shorter than its 17-byte header"):
            decode(data[:length])
        with pytest.raises(CorruptRecord):
            check(data[:length])


def test_an_expiry_not_after_the_timestamp_is_corrupt() -> None:
    for timestamp, expires in ((5, 5), (5, 4), (5, 0), (MAX_U64, 1)):
        data = struct.pack(">QBQ", timestamp, 0x02, expires) + b"v"
        with pytest.raises(CorruptRecord, match="not after its timestamp"):
            decode(data)


def test_a_tombstone_with_an_expiry_is_corrupt() -> None:
    for tail in (b"", b"v"):
        with pytest.raises(CorruptRecord, match="tombstone record carries an expiry"):
            decode(struct.pack(">QBQ", 5, 0x03, 9) + tail)


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
