"""kvnode.coordinator.read_repair in-process: a ReadRound over scripted replicas on real Storage (and through
the
Coordinator's reads), repairing the stale replicas after the answer, late answers included."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from pathlib import Path

from kvnode.coordinator.quorum import Quorum
from kvnode.coordinator.read_repair import ReadRound
from kvnode.replica import Answered, Replica, answer_future
from kvnode.replica.errors import ReplicaError, ReplicaUnavailable
from kvnode.replica.local import LocalReplica
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record
from tests.replicas import URLS, ScriptedReplica, coordinator_node, run_callbacks, storages, unjudged_fence

OLD, NEW = Record.put(100, b"old"), Record.put(200, b"new")


def scripted(stores: list[Storage]) -> list[ScriptedReplica]:
    return [ScriptedReplica(f"http://{chr(ord('a') + i)}:1", store) for i, store in enumerate(stores)]


def ask(round_: ReadRound, replica: Replica) -> asyncio.Future[Record | None]:
    """Start one replica's read of the round and tell the round its outcome, as a fan-out does; the
    outcome, awaitable."""

    def start(resolve: Answered[Record | None]) -> None:
        round_.start(replica, partial(told, resolve))

    def told(resolve: Answered[Record | None], error: ReplicaError | None, record: Record | None) -> None:
        round_.ended(replica, error, record)
        resolve(error, record)

    return answer_future(asyncio.get_running_loop(), start)


class Counts:
    def __init__(self) -> None:
        self.repairs = 0
        self.observed: list[int] = []

    def repair(self) -> None:
        self.repairs += 1


async def test_replicas_holding_an_older_version_or_none_get_the_newest_after_the_round(
    tmp_path: Path,
) -> None:
    with storages(tmp_path, ["a", "b", "c"]) as stores:
        a, b, c = scripted(stores)
        a.storage.apply(b"k", NEW)
        b.storage.apply(b"k", OLD)
        counts = Counts()
        round_ = ReadRound(b"k", counts.observed.append, counts.repair)
        answers = [await ask(round_, replica) for replica in (a, b, c)]
        assert answers == [NEW, OLD, None]
        assert a.writes == b.writes == c.writes == []  # nothing before the fan-out is over
        round_.close()
        await run_callbacks()
        assert [replica.storage.read(b"k") for replica in (a, b, c)] == [NEW, NEW, NEW]
        assert (a.writes, b.writes, c.writes) == ([], [(b"k", NEW)], [(b"k", NEW)])
        assert counts.repairs == 2
        assert sorted(counts.observed) == [100, 200]  # every version seen moves the clock


async def test_a_late_answer_is_repaired_once_it_arrives_and_never_delays_the_round(tmp_path: Path) -> None:
    with storages(tmp_path, ["a", "b", "c"]) as stores:
        a, b, c = scripted(stores)
        for replica in (a, b):
            replica.storage.apply(b"k", NEW)
        c.storage.apply(b"k", OLD)
        c.holding = True  # answers after the client's quorum (2 of 3) was reached
        counts = Counts()
        round_ = ReadRound(b"k", counts.observed.append, counts.repair)
        futures = [ask(round_, replica) for replica in (a, b, c)]
        round_.close()
        await run_callbacks()
        assert not futures[2].done() and counts.repairs == 0
        c.holding = False  # so the repair write it is sent lands at once
        c.release()
        await run_callbacks()
        assert c.storage.read(b"k") == NEW and counts.repairs == 1


async def test_a_newer_tombstone_is_repaired_over_an_older_value(tmp_path: Path) -> None:
    with storages(tmp_path, ["a", "b"]) as stores:
        a, b = scripted(stores)
        deleted = Record.delete(300)
        a.storage.apply(b"k", deleted)
        b.storage.apply(b"k", NEW)
        round_ = ReadRound(b"k", lambda _: None, lambda: None)
        for replica in (a, b):
            await ask(round_, replica)
        round_.close()
        await run_callbacks()
        assert b.storage.read(b"k") == deleted


async def test_agreeing_failed_or_lone_replicas_are_not_repaired(tmp_path: Path) -> None:
    with storages(tmp_path, ["a", "b", "c"]) as stores:
        a, b, c = scripted(stores)
        a.storage.apply(b"k", NEW)
        b.storage.apply(b"k", NEW)
        c.fail_with = ReplicaUnavailable("http://c:1 is unreachable: refused")
        counts = Counts()
        round_ = ReadRound(b"k", counts.observed.append, counts.repair)
        for replica in (a, b, c):
            ask(round_, replica).add_done_callback(lambda future: future.exception())
        round_.close()
        await run_callbacks()
        assert counts.repairs == 0 and a.writes == b.writes == c.writes == []
        lone = ReadRound(b"k", counts.observed.append, counts.repair)
        await ask(lone, ScriptedReplica("http://d:1", stores[2]))  # one answer: nothing to compare with
        lone.close()
        await run_callbacks()
        assert counts.repairs == 0


async def test_a_coordinator_read_repairs_the_stale_replica_and_counts_it(tmp_path: Path) -> None:
    with coordinator_node(tmp_path, "async") as node:
        for url in URLS[:2]:
            node.storages[url].apply(b"k", NEW)
        node.storages[URLS[2]].apply(b"k", OLD)
        assert await node.coordinator.get(b"k", Quorum(ack=2, copies=3)) == NEW
        await run_callbacks()
        assert node.held(URLS[2], b"k") == NEW
        assert node.coordinator.stats.read_repairs == 1


async def test_a_repair_stamped_beyond_the_skew_does_not_poison_local_storage(tmp_path: Path) -> None:
    """A peer with a bad clock holds a version a minute ahead: the read still answers it (a read stores
    nothing), but this node's own storage refuses the repair (kvnode.clocks.fence)."""
    with storages(tmp_path, ["a", "b"]) as (mine, theirs):
        local = LocalReplica(URLS[0], mine, unjudged_fence())
        peer = ScriptedReplica(URLS[1], theirs)
        ahead = Record.put(time.time_ns() // 1000 + 60_000_000, b"from-a-minute-ahead")
        theirs.apply(b"k", ahead)
        mine.apply(b"k", OLD)
        round_ = ReadRound(b"k", lambda _: None, lambda: None)
        assert [await ask(round_, replica) for replica in (local, peer)] == [OLD, ahead]
        round_.close()
        await run_callbacks()
        assert mine.read(b"k") == OLD
        assert local.meter.calls["write", "skew_refused"] == 1
