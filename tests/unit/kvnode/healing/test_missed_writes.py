"""kvnode.healing.missed_writes in-process: a node whose storage refuses writes as a full disk does (its
LevelDB replaced by one whose writes fail), its peers other in-process nodes, its pauses taken by a sleep
that waits for nothing, and storage's retry clock moved by hand. (tests/cluster/test_full_disk.py runs it
on a real full disk.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.healing.missed_writes import MissedWrites
from kvnode.storage.keyspace import StorageFull
from kvnode.storage.records import Record
from tests.drivers import FailingWrites, InProcessNode, in_process_nodes, until


def refuse(node: InProcessNode, key: str, record: Record) -> None:
    """The write this node's full disk refuses, as its own copy of a write its peers took."""
    with pytest.raises(StorageFull):
        node.storage.apply(key.encode(), record)


@contextlib.asynccontextmanager
async def a_full_node_and_two_peers(
    tmp_path: Path, now: list[float]
) -> AsyncIterator[tuple[InProcessNode, InProcessNode, InProcessNode]]:
    """Three in-process nodes, their summaries built, the first's disk full; its storage reads ``now``
    for when it may open its database again."""
    async with in_process_nodes(tmp_path, 3, storage_now_s=lambda: now[0]) as (one, two, three):
        await until(lambda: all(node.upkeep.ready.is_set() for node in (one, two, three)), "summaries built")
        one.storage._db = FailingWrites(one.storage._db)
        yield one, two, three


@contextlib.asynccontextmanager
async def making_good(node: InProcessNode) -> AsyncIterator[AntiEntropy]:
    """MissedWrites started on ``node``; the anti-entropy it repairs through."""
    driver = node.anti_entropy()
    missed = MissedWrites(node.storage, driver, sleep=node.sleep)
    missed.start()
    try:
        yield driver
    finally:
        await missed.stop()
        await driver.stop()


async def test_the_writes_a_full_disk_refused_are_fetched_from_the_peers_once_it_writes_again(
    tmp_path: Path,
) -> None:
    now = [0.0]
    async with a_full_node_and_two_peers(tmp_path, now) as (one, two, three), making_good(one):
        records = {}
        for index in range(20):
            key = f"refused-{index}"
            records[key] = two.put(key, b"acknowledged by the peers")
            three.storage.apply(key.encode(), records[key])
            refuse(one, key, records[key])
        retries = len(one.sleep.asked)
        await until(lambda: len(one.sleep.asked) > retries + 2, "a few looks at a storage still full")
        assert one.storage.missed
        assert all(one.storage.read(key.encode()) is None for key in records)
        now[0] = 10.0  # space freed: storage opens its database again at its next look
        await until(lambda: not one.storage.missed, "the refused writes made good")
        assert all(one.storage.read(key.encode()) == record for key, record in records.items())


async def test_the_mark_stays_until_every_peer_was_repaired_with_after_the_last_refusal(
    tmp_path: Path,
) -> None:
    """Started after the refusal, as at a start that finds the mark a run before a restart left."""
    now = [0.0]
    async with a_full_node_and_two_peers(tmp_path, now) as (one, _, three):
        record = three.put("only-on-three", b"v")
        refuse(one, "only-on-three", record)
        now[0] = 10.0
        one.peers[three.url].reachable = False
        async with making_good(one) as driver:
            await until(lambda: driver.totals.exchanges["failed"] >= 2, "three tried more than once")
            assert one.storage.missed and one.storage.read(b"only-on-three") is None
            completed = driver.totals.exchanges["completed"]
            one.peers[three.url].reachable = True
            await until(lambda: not one.storage.missed, "the refused write made good")
            assert one.storage.read(b"only-on-three") == record
            # two, done before three came back, was not repaired with again: one exchange more, three's.
            assert driver.totals.exchanges["completed"] == completed + 1
