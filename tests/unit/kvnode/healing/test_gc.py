"""kvnode.healing.gc's driver in-process: GarbageCollector over real storage, confirming with the other
in-process nodes' local replicas, its passes paced by a sleep that waits for nothing; a cleanup (surplus
copies dropped at once, once their owners hold them), a pass once a change settles (none before the
passes start), a pass that waits while the loop is starved. (The rule itself is
tests/unit/kvnode/healing/test_gc_rule.py; tests/cluster/test_gc.py and tests/cluster/test_cleanup.py run
GC on real nodes.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kvnode.healing.cleanup_run import CleanupRefused
from kvnode.healing.gc import GarbageCollector
from kvnode.healing.gc_rule import GcRule
from kvnode.loop_lag import Starvation
from kvnode.storage.records import Record, encode
from kvnode.topology.epoch import Epoch
from tests.drivers import InProcessNode, NoWait, in_process_nodes, until

GRACE_US = 1_000_000
ARRIVAL_US = 1_000_000
INTERVAL_S = 3600.0


def gc_of(
    node: InProcessNode,
    others: list[InProcessNode],
    *,
    settled_since: int | None = None,
    sleep: NoWait | None = None,
    starvation: Starvation | None = None,
) -> GarbageCollector:
    rule = GcRule(
        node.url,
        node.membership.placement(),
        grace_us=GRACE_US,
        arrival_us=ARRIVAL_US,
        settled_since=settled_since,
    )
    replicas = {other.url: other.local for other in others}
    marks = node.system.repair_marks
    return GarbageCollector(
        node.storage,
        rule,
        marks,
        node.clock.current,
        INTERVAL_S,
        replicas,
        sleep=node.sleep if sleep is None else sleep,
        starvation=starvation,
    )


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
        assert one.sleep.asked[:3] == [INTERVAL_S] * 3


class NoInterval(NoWait):
    """A sleep whose GC interval never ends (only the passes a test asks for run); its paces do at once."""

    async def __call__(self, seconds: float) -> None:
        if seconds == INTERVAL_S:
            await asyncio.Event().wait()
        await super().__call__(seconds)


def keys_not_owned_by(node: InProcessNode, count: int, owned: bool = False) -> list[bytes]:
    """The first ``count`` keys ``node`` does not own (``owned``: does own)."""
    placement = node.membership.placement()
    keys = (b"key-%d" % i for i in range(1000))
    return [key for key in keys if (node.url in placement.owners(key)) is owned][:count]


def everywhere(nodes: list[InProcessNode], key: bytes, record: Record) -> Record:
    for node in nodes:
        node.storage.apply(key, record)
    return record


async def test_a_cleanup_drops_at_once_the_surplus_copies_every_owner_holds_and_names_those_that_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with in_process_nodes(tmp_path, 4, replication=3) as nodes:
        one, *others = nodes
        held, unheld, deleted = keys_not_owned_by(one, 3)
        kept_copy = everywhere(nodes, held, Record.put(one.clock.now(), b"value"))
        lacking = one.membership.placement().owners(unheld)[2]
        behind = next(node for node in nodes if node.url == lacking)
        behind.storage.apply(unheld, Record.put(1, b"older"))
        newest = everywhere(
            [node for node in nodes if node is not behind], unheld, Record.put(one.clock.now(), b"v")
        )
        everywhere(nodes, deleted, Record.delete(one.clock.now()))  # within its grace period
        (owned,) = keys_not_owned_by(one, 1, owned=True)
        one.storage.apply(owned, Record.put(one.clock.now(), b"mine"))
        compacted: list[tuple[bytes, bytes]] = []
        monkeypatch.setattr(one.storage, "compact", lambda start, stop: compacted.append((start, stop)))
        driver = gc_of(one, others, settled_since=one.clock.current())
        await driver.run_pass()  # GC alone keeps them all, for the grace period: counted as surplus
        assert (driver.counts.surplus, driver.counts.unowned_dropped) == (3, 0)
        run = driver.request_cleanup()
        assert driver.request_cleanup() is run  # the one running
        await until(lambda: run.done, "the cleanup's end")
        assert one.storage.read(held) is None and all(other.storage.read(held) for other in others)
        assert one.storage.read(unheld) is not None and one.storage.read(deleted) is not None
        assert one.storage.read(owned) is not None
        assert (run.scanned, run.dropped, run.bytes) == (4, 1, len(held) + len(encode(kept_copy)))
        assert (run.kept_in_grace, run.unconfirmed, dict(run.unconfirmed_by)) == (1, 1, {lacking: 1})
        assert not run.completed and f"not confirmed by {lacking} (1)" in run.summary()
        assert (driver.counts.surplus, driver.counts.unowned_dropped, driver.counts.unconfirmed) == (2, 1, 1)
        assert compacted == [(held, held)]  # a surplus copy's span is compacted too
        behind.storage.apply(unheld, newest)
        again = driver.request_cleanup()
        await until(lambda: again.done, "the second cleanup's end")
        assert again is not run and again.completed and again.dropped == 1 and again.kept_in_grace == 1
        assert driver.counts.surplus == 1  # the tombstone, for its grace period


async def test_a_cleanup_is_refused_while_a_membership_change_is_under_way(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        driver = gc_of(one, [two])  # settled since: none
        with pytest.raises(CleanupRefused, match="a membership change is under way"):
            driver.request_cleanup()
        assert driver.cleanup is None


async def test_a_pass_runs_once_a_membership_change_settles_counting_what_it_left(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 4, replication=3) as nodes:
        one, *others = nodes
        for key in keys_not_owned_by(one, 2):
            one.storage.apply(key, Record.put(one.clock.now(), b"value"))
        driver = gc_of(one, others, sleep=NoInterval())
        driver.start()
        peers = {other.url: other.local for other in others}
        driver.use(Epoch(one.url, one.membership.with_joining("http://n9:8080"), peers, since=1))
        await until(lambda: not driver._tasks.running("settled"), "no pass while a change is under way")
        assert driver.counts.passes == 0
        driver.use(Epoch(one.url, one.membership, peers, since=one.clock.current()))
        await until(lambda: driver.counts.passes == 1, "a pass once it settled")
        assert driver.counts.surplus == 2
        await driver.stop()


async def test_a_change_that_settles_before_the_passes_start_starts_no_pass(tmp_path: Path) -> None:
    """The node adopts its membership while it is wired, before GC starts: no pass runs before start."""
    async with in_process_nodes(tmp_path, 3, replication=3) as nodes:
        one, *others = nodes
        driver = gc_of(one, others, sleep=NoInterval())
        peers = {other.url: other.local for other in others}
        driver.use(Epoch(one.url, one.membership, peers, since=one.clock.current()))
        assert not driver._tasks.running("settled") and driver.counts.passes == 0
        await driver.stop()


async def test_a_pass_waits_while_the_event_loop_is_starved(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        one.put("alive", b"value")
        starvation = Starvation(enter_s=0.1, exit_s=0.02, window_s=1.0)
        starvation.observe(0.5, now=0.0)  # a tick half a second late: busy
        driver = gc_of(one, [two], starvation=starvation)
        running = asyncio.ensure_future(driver.run_pass())
        for _ in range(100):
            await asyncio.sleep(0)
        assert not running.done() and driver.counts.passes == 0
        starvation.observe(0.001, now=0.1)  # a calm tick
        await running
        assert driver.counts.passes == 1
