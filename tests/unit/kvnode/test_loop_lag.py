"""kvnode.loop_lag: the monitor sees a long step as about its length, and whether it ran; it ticks on the
beats' grid while the loop is quiet and every interval once it is not; starvation sheds only a loop that
stays behind, and background work waits for a calm tick."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kvnode.loop_lag import LoopLagMonitor, Starvation


async def _after_one_long_step(monitor: LoopLagMonitor, step: Callable[[], None]) -> None:
    """Run ``step`` as one callback, and return once the monitor's tick it delayed has run."""
    await asyncio.sleep(0.05)  # a few ticks first: the timer is pending when the step starts
    ticked: list[int] = []

    def long_step() -> None:
        step()
        ticked.append(monitor.histogram.count)

    asyncio.get_running_loop().call_soon(long_step)
    while not ticked or monitor.histogram.count == ticked[0]:
        await asyncio.sleep(0.001)


def _hold_cpu(seconds: float = 0.3) -> None:
    """Run on the CPU until this thread has used ``seconds`` of it (however long that takes beside CPU
    hogs)."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_one_long_callback_is_seen_as_about_its_length_and_as_running_if_it_ran() -> None:
    async def run() -> tuple[float, float, float]:
        monitor = LoopLagMonitor(quiet_interval=0.0)  # never quiet: every tick 50 ms apart
        monitor.start()
        await _after_one_long_step(monitor, lambda: time.sleep(0.3))  # holds the loop, runs on no CPU
        waited = (monitor.worst_s, monitor.window_ran_s)
        monitor.reset()
        await _after_one_long_step(monitor, _hold_cpu)
        await monitor.stop()
        assert not monitor.starvation.shedding  # one long step is not a starved loop
        return *waited, monitor.window_ran_s

    worst, ran_while_sleeping, ran_while_running = asyncio.run(run())
    # At least the step's length less one tick interval (it may have been due anywhere within the step);
    # more on a loaded machine, never less.
    assert worst >= 0.3 - LoopLagMonitor().interval
    assert ran_while_sleeping < 0.1  # a wait, not a step running on the loop's thread
    assert ran_while_running >= 0.3 - LoopLagMonitor().interval


def test_starvation_sheds_only_a_loop_that_stays_behind_and_stops_once_calm_for_a_window() -> None:
    starvation = Starvation(enter_s=0.1, exit_s=0.02, window_s=1.0)

    def shedding_after(*ticks: tuple[float, float]) -> bool:
        for lag, now in ticks:
            starvation.observe(lag, now)
        return starvation.shedding

    assert not shedding_after((0.8, 10.0), (0.001, 10.01))  # one long step: late once, then on time
    assert not starvation.busy
    assert shedding_after(*((0.15, 20.0 + tick * 0.16) for tick in range(12)))  # behind for over a second
    assert shedding_after((0.05, 22.0), (0.001, 22.1))  # better, not calm for a window yet
    assert shedding_after((0.03, 22.6), (0.001, 22.7), (0.001, 23.5))  # calm broken: the window restarts
    assert not shedding_after((0.001, 23.7))


def test_calm_returns_at_once_unless_busy_and_then_at_the_first_calm_tick() -> None:
    async def run() -> list[str]:
        starvation = Starvation(enter_s=0.1, exit_s=0.02, window_s=1.0)
        events: list[str] = []
        await starvation.calm()
        events.append("idle: at once")
        starvation.observe(0.05, now=1.0)

        async def background() -> None:
            await starvation.calm()
            events.append("resumed")

        task = asyncio.create_task(background())
        await asyncio.sleep(0)
        events.append("busy: waiting")
        starvation.observe(0.001, now=1.1)
        await task
        return events

    assert asyncio.run(run()) == ["idle: at once", "busy: waiting", "resumed"]


def test_a_quiet_loop_ticks_on_the_beats_grid_and_one_long_step_makes_it_tick_every_interval() -> None:
    async def run() -> tuple[list[float], float, float, bool]:
        monitor = LoopLagMonitor(interval=0.05, quiet_interval=0.25)
        monitor.start()
        async with asyncio.timeout(30):  # an idle loop turns quiet at its first on-time tick
            while not monitor.quiet:
                await asyncio.sleep(0.01)
        assert monitor._timer is not None
        due = [monitor._timer.when()]  # the pending quiet tick's due time, on the loop's clock
        await _after_one_long_step(monitor, lambda: _hold_cpu(0.5))  # spans a quiet tick's due time
        after_step = monitor.quiet
        await monitor.stop()
        return due, monitor.worst_s, monitor.window_ran_s, after_step

    due, worst, ran, quiet_after_step = asyncio.run(run())
    assert abs(due[0] / 0.25 - round(due[0] / 0.25)) < 1e-6  # on the grid the heartbeats fall due on
    assert not quiet_after_step  # late: the next tick is 50 ms away
    # A quiet tick is due up to 1.5 quiet intervals ahead: the step is seen as at least its length less that,
    # and as running (less the quarter of the wait a quiet loop may have run), never less.
    assert worst >= 0.5 - 0.375
    assert ran >= 0.5 - 0.375


def test_a_monitor_whose_quiet_interval_is_not_longer_than_its_interval_never_turns_quiet() -> None:
    async def run() -> bool:
        monitor = LoopLagMonitor(interval=0.05, quiet_interval=0.025)  # a replica timeout of 100 ms
        monitor.start()
        ticks = monitor.histogram.count
        async with asyncio.timeout(30):
            while monitor.histogram.count < ticks + 3:
                await asyncio.sleep(0.01)
        await monitor.stop()
        return monitor.quiet

    assert not asyncio.run(run())
