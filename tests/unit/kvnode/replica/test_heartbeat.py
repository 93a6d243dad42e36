"""kvnode.replica.heartbeat's timer on the running loop: a beat falls due at the next point of the grid on
the loop's clock, and the beat that starts it again is followed by one at the point after; stop cancels
the beat due (a lost channel's)."""

from __future__ import annotations

import asyncio

from kvnode.replica.heartbeat import BEATS_PER_TIMEOUT, Heartbeat


async def test_beats_fall_on_the_grid_one_interval_apart_while_each_starts_the_next() -> None:
    loop = asyncio.get_running_loop()
    beats: list[float] = []

    def beat() -> None:
        beats.append(loop.time())
        if len(beats) < 3:
            heartbeat.start()

    heartbeat = Heartbeat(0.4, beat)
    assert heartbeat.interval == 0.4 / BEATS_PER_TIMEOUT == 0.1
    heartbeat.stop()  # not started: nothing to stop
    heartbeat.start()
    await asyncio.sleep(0.6)
    points = [round(at / heartbeat.interval) for at in beats]
    assert len(beats) == 3 and points == list(range(points[0], points[0] + 3)), beats
    assert all(at >= point * heartbeat.interval - 0.002 for at, point in zip(beats, points, strict=True))


async def test_a_stopped_heartbeat_does_not_beat() -> None:
    beats: list[None] = []
    heartbeat = Heartbeat(0.2, lambda: beats.append(None))
    heartbeat.start()
    heartbeat.stop()
    await asyncio.sleep(0.15)  # past the point it was due at
    assert beats == []
