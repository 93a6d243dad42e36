"""kvnode.healing.anti_entropy's driver in-process: AntiEntropy over real storage and summaries, its peer
another in-process node answering its calls directly, its pauses taken by a sleep that waits for nothing.
(tests/cluster/test_anti_entropy.py runs the same exchanges between real nodes.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kvnode.loop_lag import Starvation
from tests.drivers import in_process_nodes, until


async def test_a_full_repair_leaves_both_nodes_with_every_newest_version(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        await until(lambda: one.upkeep.ready.is_set() and two.upkeep.ready.is_set(), "summaries built")
        for index in range(50):
            one.put(f"one-{index}", b"1")
            two.put(f"two-{index}", b"2")
        one.put("both", b"older")
        newest = two.put("both", b"newer")
        two.put("gone", b"x")
        deleted = one.put("gone", b"", tombstone=True)

        driver = one.anti_entropy()
        run = await driver.repair_all()

        outcome = run.outcomes[two.url]
        assert outcome.completed, outcome.reason
        assert (outcome.sent, outcome.received) == (51, 51)
        for node in (one, two):
            assert all(node.storage.read(f"one-{i}".encode()) is not None for i in range(50))
            assert all(node.storage.read(f"two-{i}".encode()) is not None for i in range(50))
            assert node.storage.read(b"both") == newest
            assert node.storage.read(b"gone") == deleted
        assert one.system.repair_marks.completed(two.url) > 0
        await driver.stop()


async def test_a_second_repair_moves_nothing(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        await until(lambda: one.upkeep.ready.is_set() and two.upkeep.ready.is_set(), "summaries built")
        two.put("key", b"value")
        driver = one.anti_entropy()
        await driver.repair_all()
        again = (await driver.repair_all()).outcomes[two.url]
        assert again.completed and (again.sent, again.received, again.segments_differing) == (0, 0, 0)
        await driver.stop()


async def test_an_unreachable_peer_is_named_and_nothing_is_recorded(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        await until(lambda: one.upkeep.ready.is_set(), "summaries built")
        one.peers[two.url].reachable = False
        driver = one.anti_entropy()
        run = await driver.repair_all()
        assert run.unreached == [two.url]
        assert run.outcomes[two.url].reason == "unreachable"
        assert driver.totals.exchanges["failed"] == 1
        await driver.stop()


async def test_continuous_exchanges_pace_by_the_interval_over_the_peers(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (one, two, three):
        await until(lambda: all(n.upkeep.ready.is_set() for n in (one, two, three)), "summaries built")
        three.put("late", b"value")
        driver = one.anti_entropy()
        driver.start()
        await until(lambda: driver.totals.exchanges["completed"] >= 4, "four exchanges")
        await driver.stop()
        assert one.storage.read(b"late") is not None
        # a random pause first (spreading the nodes apart), then interval / peers after each exchange
        assert one.sleep.asked[0] <= 60.0 / 2
        assert one.sleep.asked[1:4] == [30.0, 30.0, 30.0]


async def test_a_peer_in_another_datacenter_is_paced_by_the_remote_rate(tmp_path: Path) -> None:
    """50 records from a peer next door move at once (--repair-rate, here a million a second); with one in
    the west, at --remote-repair-rate 100, its 50 records and the 50 it lacks take a second, a window of 64
    at a time: paced apart."""
    async with in_process_nodes(tmp_path, 3, datacenters=("east", "east", "west")) as (one, two, three):
        await until(lambda: all(n.upkeep.ready.is_set() for n in (one, two, three)), "summaries built")
        for index in range(50):
            two.put(f"two-{index}", b"2")
            three.put(f"three-{index}", b"3")
        driver = one.anti_entropy(remote_rate=100)
        near = await driver.repair_with(one.peer(two.url))
        paced_near = list(one.sleep.asked)
        far = await driver.repair_with(one.peer(three.url))
        paced_far = one.sleep.asked[len(paced_near) :]
        await driver.stop()
        assert near.received == far.received == far.sent == 50
        assert paced_near == [] and len(paced_far) == 2 and 0.9 < paced_far[-1] <= 1.0


async def test_a_repair_waits_while_the_loop_is_busy_and_goes_on_once_it_is_calm(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (one, two):
        await until(lambda: one.upkeep.ready.is_set() and two.upkeep.ready.is_set(), "summaries built")
        for index in range(50):
            two.put(f"two-{index}", b"2")
        starvation = Starvation()
        starvation.observe(0.5, now=1.0)  # the loop's last tick was half a second late: busy
        driver = one.anti_entropy(starvation)
        repair = asyncio.ensure_future(driver.repair_all())
        await until(lambda: driver.current is not None and driver.current.segments_differing > 0, "compared")
        for _ in range(50):  # turns of the loop in which a repair not waiting would have moved records
            await asyncio.sleep(0)
        assert driver.current is not None and driver.current.received == 0
        starvation.observe(0.001, now=1.01)  # a calm tick
        run = await repair
        assert run.outcomes[two.url].received == 50
        await driver.stop()
