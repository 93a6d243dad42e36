"""kvnode.coordinator.scan: the k-way merge of every member's pages, newest version per key among its
owners, over members paged from memory (two versions a page) or failing as a down member would."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kvnode.coordinator.scan import PageSource, ScanUnavailable, merged
from kvnode.replica import pages
from kvnode.replica.errors import ReplicaError, ReplicaUnavailable
from kvnode.storage.records import CorruptRecord, Record, decode, encode

NOW = 1_000_000
A, B, C = "http://a", "http://b", "http://c"


class Member:
    """A member's stored versions, read two a page, from a start to the scan's end; ``asked`` keeps the
    start of each page asked for. ``fails_at`` makes the page asked at that start fail."""

    def __init__(self, versions: dict[bytes, Record | bytes], end: bytes | None = None) -> None:
        self.versions = {
            key: version if isinstance(version, bytes) else encode(version)
            for key, version in sorted(versions.items())
        }
        self.end = end
        self.asked: list[bytes] = []
        self.fails_at: bytes | None = None

    async def page(self, start: bytes) -> pages.Page:
        self.asked.append(start)
        if start == self.fails_at:
            raise ReplicaUnavailable("connection lost")
        keys = [key for key in self.versions if key >= start and (self.end is None or key < self.end)]
        return [(key, self.versions[key]) for key in keys[:2]], len(keys) > 2


async def scan(
    members: dict[str, Member], owners: dict[bytes, Sequence[str]] | None = None, replication: int = 3
) -> list[tuple[bytes, bytes]]:
    sources: dict[str, PageSource] = {url: member.page for url, member in members.items()}
    every = tuple(members)
    owned = owners or {}
    return [
        entry async for entry in merged(sources, b"", lambda key: owned.get(key, every), replication, NOW)
    ]


def value(timestamp: int, text: bytes) -> Record:
    return Record.put(timestamp, text)


async def test_each_live_key_once_in_order_with_its_newest_version() -> None:
    a = Member({b"k1": value(1, b"old"), b"k2": value(5, b"a's"), b"k3": value(2, b"gone")})
    b = Member(
        {b"k1": value(3, b"new"), b"k3": Record.delete(4), b"k4": Record.put(1, b"expired", ttl_us=10)}
    )
    c = Member({b"k0": value(1, b"only c's"), b"k2": value(4, b"c's")})
    assert await scan({A: a, B: b, C: c}) == [(b"k0", b"only c's"), (b"k1", b"new"), (b"k2", b"a's")]


async def test_a_version_counts_only_from_an_owner_of_its_key() -> None:
    a = Member({b"k": value(1, b"the owners'")})
    c = Member({b"k": value(9, b"held without owning it")})
    assert await scan({A: a, C: c}, owners={b"k": (A, B)}) == [(b"k", b"the owners'")]


async def test_members_are_read_a_page_at_a_time_to_the_ranges_end() -> None:
    keys = [b"k%d" % index for index in range(5)]
    a = Member({key: value(1, key) for key in keys}, end=b"k4")
    assert await scan({A: a}) == [(key, key) for key in keys[:4]]
    assert a.asked == [b"", pages.next_start(([(b"k1", b"")], True))]  # two pages of two


async def test_members_down_at_the_start_are_left_out_while_each_key_keeps_an_owner() -> None:
    a = Member({b"k": value(1, b"a's")})
    down = Member({})
    down.fails_at = b""
    assert await scan({A: a, B: down}, replication=2) == [(b"k", b"a's")]
    with pytest.raises(ScanUnavailable, match=f"^1 members did not answer, N=1: {B}$"):
        await scan({A: a, B: down}, replication=1)


async def test_a_member_failing_after_its_first_page_fails_the_scan() -> None:
    a = Member({b"k%d" % index: value(1, b"v") for index in range(4)})
    a.fails_at = pages.next_start(([(b"k1", b"")], True))
    with pytest.raises(ReplicaError, match="connection lost"):
        await scan({A: a, B: Member({})})


async def test_a_corrupt_version_is_passed_over_for_another_owners() -> None:
    corrupt = b"\x00not a record"
    with pytest.raises(CorruptRecord):
        decode(corrupt)
    a = Member({b"k": corrupt})
    b = Member({b"k": value(1, b"b's")})
    assert await scan({A: a, B: b}) == [(b"k", b"b's")]
