"""kvnode.replica.heartbeat's timer on the running loop: each start asks for a beat at the next point of
the grid on the loop's clock, a beat started again asks for the point after; stop cancels the beat due
(a lost channel's)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

import pytest

from kvnode.replica.heartbeat import BEATS_PER_TIMEOUT, Heartbeat, beat_interval


async def test_each_start_schedules_the_next_point_of_the_grid_and_no_beat_runs_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the heartbeat asks of the loop, whenever the beats run (a busy machine runs them late): each
    start, the first and those made by a beat, a point of the grid half a beat to a beat and a half
    ahead, each after the one before."""
    loop = asyncio.get_running_loop()
    dues: list[float] = []  # when each start asked its beat to run
    beats: list[float] = []  # when each beat ran
    call_at = loop.call_at

    def asked(when: float, callback: Callable[..., object], *args: object) -> asyncio.TimerHandle:
        if callback is beat:  # not the deadline's timer below
            dues.append(when)
        return call_at(when, callback, *args)

    monkeypatch.setattr(loop, "call_at", asked)
    third = asyncio.Event()

    def beat() -> None:
        beats.append(loop.time())
        if len(beats) < 3:
            heartbeat.start()
        else:
            third.set()

    heartbeat = Heartbeat(0.4, beat)
    assert heartbeat.interval == beat_interval(0.4) == 0.4 / BEATS_PER_TIMEOUT == 0.1
    heartbeat.stop()  # not started: nothing to stop
    started_at = loop.time()
    heartbeat.start()
    async with asyncio.timeout(30):  # the deadline is for a busy machine; the claims are not timings
        await third.wait()
    interval = heartbeat.interval
    assert len(dues) == 3 and all(abs(due / interval - round(due / interval)) < 1e-9 for due in dues)
    assert all(earlier < later for earlier, later in itertools.pairwise(dues))
    for started, due in zip([started_at, *beats], dues, strict=False):
        assert interval / 2 < due - started <= 1.5 * interval + 0.001
    # asyncio runs a timer once it is due within the clock's resolution: a hair early, never a beat early
    assert all(ran >= due - 0.001 for ran, due in zip(beats, dues, strict=True))


async def test_a_stopped_heartbeat_does_not_beat() -> None:
    beats: list[None] = []
    heartbeat = Heartbeat(0.2, lambda: beats.append(None))
    heartbeat.start()
    heartbeat.stop()
    await asyncio.sleep(0.15)  # past the point it was due at
    assert beats == []
