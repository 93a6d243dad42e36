"""kvnode.replica.pages: a page of stored versions over a key range, bounded by records and bytes, the
key the next page starts at, and the codecs that refuse what they did not make."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvnode.replica.channel.wire import WireError
from kvnode.replica.pages import (
    PAGE_BYTES,
    PAGE_RECORDS,
    decode_page,
    decode_scan_request,
    encode_page,
    next_start,
    read_page,
)
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record, encode


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    opened = Storage.open(tmp_path / "node", fsync=False)
    yield opened
    opened.close()


def test_a_page_holds_the_range_tombstones_included_and_says_whether_more_follow(storage: Storage) -> None:
    for key in (b"a", b"b", b"c", b"d"):
        storage.apply(key, Record(1, False, key))
    storage.apply(b"c", Record(2, True, b""))
    entries, more = read_page(storage, b"b", b"d")
    assert entries == [(b"b", encode(Record(1, False, b"b"))), (b"c", encode(Record(2, True, b"")))]
    assert not more
    assert read_page(storage, b"b", None) == ([*entries, (b"d", encode(Record(1, False, b"d")))], False)
    assert read_page(storage, b"e", None) == ([], False)


def test_pages_of_many_records_follow_one_another_to_the_last(storage: Storage) -> None:
    keys = [b"k%04d" % index for index in range(PAGE_RECORDS + 10)]
    for key in keys:
        storage.apply(key, Record(1, False, b"v"))
    first = read_page(storage, b"", None)
    assert [key for key, _ in first[0]] == keys[:PAGE_RECORDS] and first[1]
    assert next_start(first) == keys[PAGE_RECORDS - 1] + b"\x00"
    second = read_page(storage, next_start(first), None)
    assert [key for key, _ in second[0]] == keys[PAGE_RECORDS:] and not second[1]


def test_a_page_ends_at_its_byte_bound_but_holds_at_least_one_record(storage: Storage) -> None:
    large = b"x" * (PAGE_BYTES // 2)
    for key in (b"a", b"b", b"c"):
        storage.apply(key, Record(1, False, large))
    entries, more = read_page(storage, b"", None)
    assert [key for key, _ in entries] == [b"a"] and more  # a and b together are over the bound
    storage.apply(b"huge", Record(1, False, b"y" * (PAGE_BYTES + 1)))
    entries, more = read_page(storage, b"huge", None)
    assert [key for key, _ in entries] == [b"huge"] and not more


def test_an_empty_page_and_keys_of_any_bytes_round_trip() -> None:
    assert decode_page(encode_page([], more=False)) == ([], False)
    entries = [(b"", b"r"), (b"\x00\xff", b""), (b"k" * 300, b"z" * 70_000)]
    assert decode_page(encode_page(entries, more=True)) == (entries, True)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "starts with whether more follow"),
        (b"\x02", "starts with whether more follow"),
        (b"\x00\x00\x01\x00", "ends inside an entry header"),
        (encode_page([(b"key", b"record")], more=False)[:-1], "runs past its end"),
    ],
)
def test_a_page_that_encode_page_did_not_make_is_refused(payload: bytes, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode_page(payload)


def test_a_scan_request_that_is_neither_empty_nor_an_end_is_refused() -> None:
    with pytest.raises(WireError, match="SCAN request"):
        decode_scan_request(b"\x02z")
