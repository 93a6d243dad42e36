"""kvnode.healing.gc's driver in-process: GarbageCollector over real storage, confirming with the other
in-process nodes' local replicas, its passes paced by a sleep that waits for nothing. (The rule itself is
tests/unit/kvnode/healing/test_gc_rule.py; tests/cluster/test_gc.py runs GC on real nodes.)"""

from __future__ import annotations

from pathlib import Path

from kvnode.healing.gc import GarbageCollector
from kvnode.healing.gc_rule import GcRule
from kvnode.storage.records import Record
from tests.drivers import InProcessNode, in_process_nodes, until

GRACE_US = 1_000_000
ARRIVAL_US = 1_000_000


def gc_of(node: InProcessNode, others: list[InProcessNode]) -> GarbageCollector:
    rule = GcRule(node.url, node.membership.placement(), grace_us=GRACE_US, arrival_us=ARRIVAL_US)
    replicas = {other.url: other.local for other in others}
    marks = node.system.repair_marks
    return GarbageCollector(node.storage, rule, marks, node.clock.current, 3600.0, replicas, sleep=node.sleep)


def old_tombstone(nodes: list[InProcessNode], key: bytes) -> Record:
    """A tombstone past its grace period and arrival bound, held by every node."""
    record = Record(nodes[0].clock.current() - 10 * (GRACE_US + ARRIVAL_US), True, b"")
    for node in nodes:
        node.storage.apply(key, record)
    return record


async def test_a_tombstone_every_replica_repaired_past_is_dropped(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as nodes:
        one, *others = nodes
        old_tombstone(nodes, b"deleted")
        one.put("alive", b"value")
        for other in others:
            one.system.repair_marks.record(other.url, one.clock.current())
        driver = gc_of(one, others)
        await driver.run_pass()
        assert driver.counts.tombstones_dropped == 1
        assert one.storage.read(b"deleted") is None
        assert one.storage.read(b"alive") is not None
        assert all(other.storage.read(b"deleted") is not None for other in others)  # each drops its own


async def test_a_tombstone_waits_for_a_replica_not_repaired_since(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as nodes:
        one, two, three = nodes
        old_tombstone(nodes, b"deleted")
        one.system.repair_marks.record(two.url, one.clock.current())  # three never repaired with one
        driver = gc_of(one, [two, three])
        await driver.run_pass()
        assert driver.counts.tombstones_dropped == 0
        assert (driver.counts.waiting, driver.counts.waiting_for) == (1, {three.url: 1})
        assert one.storage.read(b"deleted") is not None


async def test_a_replica_holding_an_older_value_keeps_the_tombstone(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        tombstone = old_tombstone([one], b"deleted")
        two.storage.apply(b"deleted", Record(tombstone.timestamp - 1, False, b"older"))
        one.system.repair_marks.record(two.url, one.clock.current())
        driver = gc_of(one, [two])
        await driver.run_pass()
        assert driver.counts.tombstones_dropped == 0 and driver.counts.unconfirmed == 1


async def test_started_it_runs_a_pass_each_interval_until_stopped(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        driver = gc_of(one, [two])
        driver.start()
        await until(lambda: driver.counts.passes >= 3, "three passes")
        await driver.stop()
        assert one.sleep.asked[:3] == [3600.0, 3600.0, 3600.0]
