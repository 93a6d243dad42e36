"""kvnode.scheduling's Tasks: a driver's tasks named and found again, stopped together (cancelled) or
waited for (not cancelled), and its pauses through the sleep a test gives it; the beats' grid."""

from __future__ import annotations

import asyncio

from kvnode.scheduling import Tasks, next_beat


async def test_a_named_task_is_found_by_its_name_until_it_ends() -> None:
    tasks = Tasks("driver")
    release = asyncio.Event()
    task = tasks.spawn(release.wait(), "waiter")
    assert task.get_name() == "driver: waiter"
    assert tasks.named("waiter") is task and tasks.running("waiter")
    release.set()
    assert await task is True
    assert not tasks.running("waiter") and tasks.named("waiter") is task  # ended, still found
    assert tasks.named("other") is None and not tasks.running("other")


async def test_an_unnamed_task_bears_its_owners_name_only() -> None:
    tasks = Tasks("driver")
    task = tasks.spawn(asyncio.sleep(0))
    assert task.get_name() == "driver" and tasks.named("") is None
    await task


async def test_stop_cancels_every_task_and_waits_for_each() -> None:
    tasks = Tasks("driver")
    forever = asyncio.Event()
    named, unnamed = tasks.spawn(forever.wait(), "named"), tasks.spawn(forever.wait())
    await tasks.stop()
    assert named.cancelled() and unnamed.cancelled()
    await tasks.stop()  # nothing left: returns at once


async def test_finish_waits_for_every_task_without_cancelling_one() -> None:
    tasks = Tasks("driver")
    ended: list[str] = []

    async def work(name: str, turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        ended.append(name)

    async def fail() -> None:
        raise RuntimeError("a task that fails does not stop the others being waited for")

    tasks.spawn(work("slow", 50), "slow")
    tasks.spawn(work("quick", 1))
    failing = tasks.spawn(fail())
    await tasks.finish()
    assert sorted(ended) == ["quick", "slow"]
    assert isinstance(failing.exception(), RuntimeError)


async def test_a_drivers_pauses_go_through_its_sleep() -> None:
    asked: list[float] = []

    async def no_wait(seconds: float) -> None:
        asked.append(seconds)

    tasks = Tasks("driver", sleep=no_wait)
    await tasks.sleep(30.0)
    await tasks.sleep(0.5)
    assert asked == [30.0, 0.5]
    assert Tasks("driver").sleep is asyncio.sleep


def test_beats_fall_due_together_whatever_their_phase_half_to_one_and_a_half_beats_ahead() -> None:
    """Every peer's heartbeat is due on one grid of the node's clock, so one wake-up beats them all; a beat
    run early or late (as far as half a beat) is followed by the next grid point, never by itself."""
    interval = 0.25
    dues = set()
    for step in range(1000):  # beats run anywhere within two seconds
        now = 100.0 + step * 0.002
        due = next_beat(now, interval)
        assert now + interval / 2 < due <= now + 1.5 * interval + 1e-9
        assert abs(due / interval - round(due / interval)) < 1e-9  # on the grid
        dues.add(round(due, 9))
    assert len(dues) == 9  # two seconds of beats at any phase: the grid's points, no more
    for late in (-0.001, 0.0, 0.001, 0.1):  # a beat due at 10.0 run a little early, on time, late
        assert next_beat(10.0 + late, interval) == 10.25
