"""kvnode.replica.clock_probe: a CLOCK call's answer becomes the peer's offset, measured from the wall clock
when the call was sent and when it was answered, and says the state of the peer's data; a failed or
cancelled call measures nothing."""

from __future__ import annotations

import asyncio

from kvnode.clocks.offsets import Offset, measure
from kvnode.replica.clock_probe import BEATS_PER_MEASUREMENT, ClockProbe

URL = "http://b:1"


class Probed:
    """A wall clock the test moves, and the samples handed over."""

    def __init__(self) -> None:
        self.now_us = 1_000
        self.samples: list[tuple[str, Offset]] = []

    def probe(self) -> ClockProbe:
        return ClockProbe(URL, (lambda url, offset: self.samples.append((url, offset)), lambda: self.now_us))


async def test_an_answer_is_sampled_as_the_offset_of_its_round_trip() -> None:
    probed = Probed()
    probe = probed.probe()
    assert probe.node_state == ""
    call: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    assert probe.measure(lambda: call) is call
    probed.now_us = 1_400  # answered 400 us after it was sent
    call.set_result((50_000, "rebuilding"))
    await asyncio.sleep(0)  # the done-callback runs on the loop's next turn
    assert probed.samples == [(URL, measure(sent_us=1_000, remote_us=50_000, received_us=1_400))]
    assert probed.samples[0][1] == Offset(offset_us=50_000 - 1_200, uncertainty_us=200)
    assert probe.node_state == "rebuilding"


async def test_a_failed_or_cancelled_call_is_no_measurement() -> None:
    probed = Probed()
    probe = probed.probe()
    loop = asyncio.get_running_loop()
    failed: asyncio.Future[object] = loop.create_future()
    cancelled: asyncio.Future[object] = loop.create_future()
    probe.measure(lambda: failed)
    probe.measure(lambda: cancelled)
    failed.set_exception(TimeoutError())
    cancelled.cancel()
    await asyncio.sleep(0)
    assert failed.exception() is not None  # retrieved, as the caller would
    assert probed.samples == [] and probe.node_state == ""


async def test_a_heartbeat_measures_the_clock_only_every_few_beats() -> None:
    probe = Probed().probe()
    calls: list[asyncio.Future[object]] = []

    def call() -> asyncio.Future[object]:
        calls.append(asyncio.get_running_loop().create_future())
        return calls[-1]

    measured = [probe.beat(call) for _ in range(3 * BEATS_PER_MEASUREMENT)]
    assert len(calls) == 3
    # The beats that measured say so: the call's answer is their sign of life, with no ping beside it.
    assert [beat for beat, did in enumerate(measured, 1) if did] == [
        BEATS_PER_MEASUREMENT * n for n in (1, 2, 3)
    ]
