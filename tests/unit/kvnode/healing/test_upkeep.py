"""kvnode.healing.upkeep with real LevelDB: the trees follow every stored version, survive a clean stop,
and are rebuilt after a crash (a stop that saved nothing), whatever was written while they were."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from kvnode.healing.summary import Summaries
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record
from kvnode.storage.system_db import SystemDb
from kvnode.topology.placement import Placement
from tests.harness import group_written

MEMBERS = ["http://a:1", "http://b:1", "http://c:1"]
PLACEMENT = Placement(MEMBERS)


def _scratch(storage: Storage) -> Summaries:
    summaries = Summaries(MEMBERS[0], PLACEMENT)
    for key, record in storage.snapshot_records():
        summaries.changed(key, None, record)
    return summaries


async def _write_randomly(storage: Storage, rng: random.Random, count: int, start: int) -> None:
    store = storage.offer if rng.random() < 0.5 else storage.apply  # in one group commit, or one by one
    for i in range(count):
        key = b"k%d" % rng.randrange(300)
        timestamp = start + i
        choice = rng.random()
        if choice < 0.25:
            record = Record.delete(timestamp)
        elif choice < 0.4:
            record = Record.put(timestamp, b"t", ttl_us=5, copies=2)
        else:
            record = Record.put(timestamp, rng.randbytes(8))
        store(key, record)
    await group_written(storage.when_written)


@pytest.mark.parametrize("seed", range(5))
async def test_summaries_match_a_rebuild_across_clean_stops_and_crashes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = 1
    for life in range(4):
        system = SystemDb.open(tmp_path)
        upkeep = SummaryUpkeep(system.summaries, MEMBERS[0], PLACEMENT)
        storage = Storage.open(tmp_path, fsync=False, on_change=upkeep.changed)
        upkeep.start(storage)
        await _write_randomly(storage, rng, 200, clock)  # while the rebuild, if any, has not run yet
        clock += 200
        await asyncio.wait_for(upkeep.ready.wait(), 10)
        await _write_randomly(storage, rng, 200, clock)
        clock += 200
        scratch = _scratch(storage)
        for peer in scratch.peers:
            assert upkeep.summaries.tree_for(peer) == scratch.tree_for(peer), (seed, life, peer)
        crashed = rng.random() < 0.5
        if not crashed:
            await upkeep.stop()
        system.close()
        storage.close()


async def test_a_clean_stop_restores_without_a_rebuild_and_a_crash_rebuilds(tmp_path: Path) -> None:
    system = SystemDb.open(tmp_path)
    upkeep = SummaryUpkeep(system.summaries, MEMBERS[0], PLACEMENT)
    storage = Storage.open(tmp_path, fsync=False, on_change=upkeep.changed)
    upkeep.start(storage)
    await asyncio.wait_for(upkeep.ready.wait(), 10)
    storage.apply(b"k", Record.put(1, b"v"))
    await upkeep.stop()
    system.close()
    storage.close()

    system = SystemDb.open(tmp_path)
    restored = SummaryUpkeep(system.summaries, MEMBERS[0], PLACEMENT)
    storage = Storage.open(tmp_path, fsync=False, on_change=restored.changed)
    assert restored.ready.is_set()  # taken back, no scan
    system.close()  # a crash: nothing saved
    storage.close()

    system = SystemDb.open(tmp_path)
    rebuilt = SummaryUpkeep(system.summaries, MEMBERS[0], PLACEMENT)
    storage = Storage.open(tmp_path, fsync=False, on_change=rebuilt.changed)
    assert not rebuilt.ready.is_set()
    rebuilt.start(storage)
    await asyncio.wait_for(rebuilt.ready.wait(), 10)
    assert rebuilt.rebuilt == 1
    assert rebuilt.summaries.tree_for(MEMBERS[1]) == _scratch(storage).tree_for(MEMBERS[1])
    await rebuilt.stop()
    system.close()
    storage.close()
