"""kvnode.replica.clock_probe: a CLOCK call's answer, or a clock ping's pong, becomes the peer's offset,
measured from the wall clock when the call or ping was sent and when it was answered, and says the state of
the peer's data; a failed or cancelled call, or a pong that is not a clock ping's, measures nothing. Every
few beats the heartbeat measures: with a clock ping on a channel that speaks them, else a CLOCK call. This
node's answers to a peer measuring it: its CLOCK answer and a clock ping's pong carry the same payload."""

from __future__ import annotations

import asyncio

import pytest

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.offsets import ClockOffsets, Offset, measure
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.channel.protocol import CLOCK_PINGS, clock_pong
from kvnode.replica.clock_probe import BEATS_PER_MEASUREMENT, ClockAnswers, ClockProbe
from kvnode.replica.readiness import NodeState

URL = "http://b:1"


class Probed:
    """A wall clock the test moves, the samples handed over, and the CLOCK calls started (each a future the
    test settles)."""

    def __init__(self) -> None:
        self.now_us = 1_000
        self.samples: list[tuple[str, Offset]] = []
        self.calls: list[asyncio.Future[object]] = []

    def call(self) -> asyncio.Future[object]:
        self.calls.append(asyncio.get_running_loop().create_future())
        return self.calls[-1]

    def probe(self) -> ClockProbe:
        sampler = (lambda url, offset: self.samples.append((url, offset)), lambda: self.now_us)
        return ClockProbe(URL, sampler, self.call)


class Channel:
    """A channel speaking ``protocol``, keeping the payloads of its pings."""

    def __init__(self, protocol: int) -> None:
        self.protocol = protocol
        self.pings: list[bytes] = []

    def ping(self, payload: bytes = b"") -> None:
        self.pings.append(payload)


async def test_an_answer_is_sampled_as_the_offset_of_its_round_trip() -> None:
    probed = Probed()
    probe = probed.probe()
    assert probe.node_state == ""
    call = probe.measure()
    assert probed.calls == [call]
    probed.now_us = 1_400  # answered 400 us after it was sent
    call.set_result((50_000, "rebuilding"))
    await asyncio.sleep(0)  # the done-callback runs on the loop's next turn
    assert probed.samples == [(URL, measure(sent_us=1_000, remote_us=50_000, received_us=1_400))]
    assert probed.samples[0][1] == Offset(offset_us=50_000 - 1_200, uncertainty_us=200)
    assert probe.node_state == "rebuilding"


async def test_a_failed_or_cancelled_call_is_no_measurement() -> None:
    probed = Probed()
    probe = probed.probe()
    failed, cancelled = probe.measure(), probe.measure()
    failed.set_exception(TimeoutError())
    cancelled.cancel()
    await asyncio.sleep(0)
    assert failed.exception() is not None  # retrieved, as the caller would
    assert probed.samples == [] and probe.node_state == ""


@pytest.mark.parametrize("protocol", [CLOCK_PINGS - 1, CLOCK_PINGS])
async def test_a_heartbeat_measures_the_clock_only_every_few_beats(protocol: int) -> None:
    """With a CLOCK call on a channel that speaks no clock pings, with a clock ping on one that does."""
    probed = Probed()
    probe, channel = probed.probe(), Channel(protocol)
    measured = [probe.beat(channel) for _ in range(3 * BEATS_PER_MEASUREMENT)]
    clock_pings = [wire.encode_timestamp(probed.now_us)] * 3
    assert (len(probed.calls), channel.pings) == ((0, clock_pings) if protocol >= CLOCK_PINGS else (3, []))
    # The beats that measured say so: the answer is their sign of life, with no other ping beside it.
    assert [beat for beat, did in enumerate(measured, 1) if did] == [
        BEATS_PER_MEASUREMENT * n for n in (1, 2, 3)
    ]


def test_a_clock_pings_pong_is_sampled_as_the_offset_of_its_round_trip() -> None:
    """The pong the peer's server builds (clock_pong) carries the ping's wall clock back, so the probe keeps
    no record of what it sent."""
    probed = Probed()
    probe, channel = probed.probe(), Channel(CLOCK_PINGS)
    for _ in range(BEATS_PER_MEASUREMENT):
        probe.beat(channel)
    (ping,) = channel.pings
    pong = clock_pong(ping, lambda: wire.encode_clock(50_000, "serving"))
    probed.now_us = 1_400
    probe.ponged(pong)
    assert probed.samples == [(URL, Offset(offset_us=50_000 - 1_200, uncertainty_us=200))]
    assert probe.node_state == "serving"


@pytest.mark.parametrize("payload", [b"beat", b"12345678", wire.encode_timestamp(1) + b"\x00" * 3])
def test_a_pong_that_is_no_clock_pings_answer_measures_nothing(payload: bytes) -> None:
    """A peer's echo of a ping that was not a clock ping, or a clock pong cut short: no measurement."""
    probed = Probed()
    probe = probed.probe()
    probe.ponged(payload)
    assert probed.samples == [] and probe.node_state == ""


def test_a_clock_answer_and_a_clock_pings_pong_carry_this_nodes_clock_and_the_state_of_its_data() -> None:
    wall_us = 1_700_000_000_123_456  # this node's wall clock, as its fence reads it
    fence = ClockFence(lambda: wall_us, 5_000_000, ClockOffsets(max_age_s=10.0), peers=0)
    answers, answerers = ClockAnswers(fence, lambda: NodeState.REBUILDING), Answerers()
    answers.register(answerers)
    frame = answerers.answer_frame([wire.CallRequest(1, wire.Op.CLOCK, b"", b"")])
    clock = wire.encode_clock(wall_us, "rebuilding")
    assert wire.decode_replies(b"".join(frame)) == [(1, wire.Status.CLOCK, clock)]
    ping = wire.encode_timestamp(wall_us - 500)  # the pinger's clock
    assert clock_pong(ping, answers.now) == ping + clock
