"""kvnode.cluster.streams: the copies a new replication factor adds, from scripted members' pages to
scripted writers (a leaving node's stream runs with real nodes in tests/cluster/test_leave.py, and the
whole change in tests/cluster/test_replication_factor.py)."""

from __future__ import annotations

import pytest

from kvnode.cluster.streams import Sender, stream_copies
from kvnode.coordinator.scan import PageSource
from kvnode.replica import pages
from kvnode.storage.records import Record, encode
from kvnode.topology.placement import Placement

MEMBERS = ["http://a:1", "http://b:1", "http://c:1", "http://d:1"]
KEYS = [f"key-{i}".encode() for i in range(200)]


def source(held: list[tuple[bytes, bytes]]) -> PageSource:
    """A member's pages of ``held``, two versions a page."""

    async def fetch(start: bytes) -> pages.Page:
        rest = sorted(entry for entry in held if entry[0] >= start)
        return rest[:2], len(rest) > 2

    return fetch


def members_holding(placement: Placement, copies: int = 0) -> dict[str, list[tuple[bytes, bytes]]]:
    """What each member holds: every key on each of its owners under ``placement``."""
    held: dict[str, list[tuple[bytes, bytes]]] = {url: [] for url in MEMBERS}
    for key in KEYS:
        raw = encode(Record.put(1, key, copies=copies))
        for url in placement.owners(key, copies):
            held[url].append((key, raw))
    return held


async def streamed(before: Placement, after: Placement, copies: int = 0) -> dict[str, list[bytes]]:
    """The keys each member was sent, from every member holding what ``before`` gives it."""
    received: dict[str, list[bytes]] = {url: [] for url in MEMBERS}
    counted: list[int] = []

    def sender(url: str) -> Sender:
        async def send(key: bytes, raw: bytes) -> object:
            received[url].append(key)
            return None

        return send

    held = members_holding(before, copies)
    sources = {url: source(held[url]) for url in MEMBERS}
    await stream_copies(sources, before, after, {url: sender(url) for url in MEMBERS}, counted.append)
    assert sum(counted) == sum(len(keys) for keys in received.values())
    return received


async def test_a_larger_factor_sends_each_key_to_the_owner_it_gains_from_each_present_owner() -> None:
    before, after = Placement(MEMBERS, replication=2), Placement(MEMBERS, replication=3)
    received = await streamed(before, after)
    for key in KEYS:
        [gained] = set(after.owners(key)) - set(before.owners(key))
        senders = [url for url in MEMBERS if key in received[url]]
        assert senders == [gained], key  # nothing to the owners it had
        assert received[gained].count(key) == 2  # a copy from each present owner: newest wins there


async def test_a_smaller_factor_sends_what_the_owners_it_loses_hold_to_every_owner_it_keeps() -> None:
    before, after = Placement(MEMBERS, replication=3), Placement(MEMBERS, replication=2)
    received = await streamed(before, after)
    for key in KEYS:
        [lost] = set(before.owners(key)) - set(after.owners(key))
        assert lost not in [url for url in MEMBERS if key in received[url]]
        for kept in after.owners(key):
            assert received[kept].count(key) == 1, key  # from the lost owner, which may hold the only copy


@pytest.mark.parametrize("replication", [(2, 3), (3, 2)])
async def test_a_version_written_to_fewer_replicas_than_either_factor_moves_nowhere(
    replication: tuple[int, int],
) -> None:
    before, after = (Placement(MEMBERS, replication=n) for n in replication)
    received = await streamed(before, after, copies=1)  # from = 1: on the first owner alone, both times
    assert not any(received.values())
