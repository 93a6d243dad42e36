"""kvnode.healing.listing: a LIST page of the keys of some segments that a peer's tree covers, with their
version digests, bounded in keys walked and bytes listed; a real store and its summaries (tests/drivers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kvnode.healing.listing import KEYS_PER_PAGE, PAGE_BYTES, in_bitmap, list_page, segment_bitmap
from kvnode.healing.summary import SEGMENTS, key_segment, version_digest
from kvnode.storage.records import Record
from tests.drivers import InProcessNode, in_process_nodes

EVERY_SEGMENT = segment_bitmap(range(SEGMENTS))


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[InProcessNode]:
    """The first of two in-process members (every key on both), its summaries ready."""
    async with in_process_nodes(tmp_path, 2) as nodes:
        await asyncio.wait_for(nodes[0].upkeep.ready.wait(), 30)
        yield nodes[0]


def listing(node: InProcessNode, cursor: bytes, bitmap: bytes) -> tuple[bytes, list[tuple[bytes, int]]]:
    return list_page(node.storage, node.upkeep.summaries, "http://n2:8080", cursor, bitmap)


def test_a_bitmap_holds_the_segments_set_and_no_others() -> None:
    bitmap = segment_bitmap([0, 9, SEGMENTS - 1])
    assert len(bitmap) == SEGMENTS // 8
    assert [segment for segment in range(SEGMENTS) if in_bitmap(bitmap, segment)] == [0, 9, SEGMENTS - 1]
    assert not in_bitmap(b"\xff", 8)  # beyond a short bitmap: not set


async def test_the_keys_of_the_segments_asked_are_listed_with_their_digests(node: InProcessNode) -> None:
    keys = [b"key-%d" % index for index in range(40)]
    for key in keys:
        node.put(key.decode(), b"value")
    wanted = {key_segment(key) for key in keys[:10]}
    cursor, entries = listing(node, b"", segment_bitmap(wanted))
    assert cursor == b""  # the last page
    listed = sorted(key for key in keys if key_segment(key) in wanted)
    assert entries == [(key, version_digest(key, node.storage.raw(key) or b"")) for key in listed]


async def test_a_version_the_peer_should_not_hold_is_not_listed_for_it(node: InProcessNode) -> None:
    node.put("shared", b"value")
    node.storage.apply(b"one copy", Record.put(node.clock.now(), b"value", copies=1))
    assert [key for key, _ in listing(node, b"", EVERY_SEGMENT)[1]] == [b"shared"]


async def test_a_page_stops_after_its_keys_walked_and_the_next_goes_on_after_its_cursor(
    node: InProcessNode,
) -> None:
    keys = [b"k%05d" % index for index in range(KEYS_PER_PAGE + 5)]
    for key in keys:
        node.put(key.decode(), b"v")
    only_the_last = segment_bitmap({key_segment(keys[-1])})
    cursor, entries = listing(node, b"", only_the_last)
    assert cursor == keys[KEYS_PER_PAGE - 1]
    assert all(key in keys[:KEYS_PER_PAGE] for key, _ in entries)
    cursor, entries = listing(node, cursor, only_the_last)
    assert cursor == b"" and entries[-1][0] == keys[-1]


async def test_a_page_stops_once_it_lists_its_bytes(node: InProcessNode) -> None:
    keys = [b"%04d" % index + b"x" * 1000 for index in range(100)]
    for key in keys:
        node.put(key.decode(), b"v")
    cursor, entries = listing(node, b"", EVERY_SEGMENT)
    listed = len(entries)
    assert listed == -(-PAGE_BYTES // (1004 + 10))  # the key that reached the bound is the page's last
    assert cursor == keys[listed - 1] == entries[-1][0]
    rest = listing(node, cursor, EVERY_SEGMENT)[1]
    assert [key for key, _ in entries + rest] == keys
