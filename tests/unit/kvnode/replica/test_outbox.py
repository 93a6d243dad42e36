"""The outbox (kvnode.replica.outbox), in-process: calls of one tick leave together, small ones framed
up to the frame target, a large one alone, nothing while the sink is paused or detached."""

from __future__ import annotations

import asyncio

from kvnode.replica.channel import wire
from kvnode.replica.outbox import Outbox


class RecordingSink:
    """A sink that keeps the frames it is given, and can be paused like a full transport."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.paused = False

    def send(self, payload: bytes) -> None:
        self.frames.append(payload)


def small(call_id: int, size: int = 100) -> bytes:
    return wire.encode_call(call_id, wire.Op.WRITE, b"k", b"r" * (size - wire.call_size(b"k")))


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_the_calls_of_one_tick_leave_in_one_frame_at_its_end() -> None:
    outbox, sink = Outbox(max_calls=1024), RecordingSink()
    outbox.attach(sink)
    messages = [small(i) for i in range(1, 4)]
    for call_id, message in enumerate(messages, 1):
        outbox.put(call_id, message)
    assert sink.frames == []  # not before the tick ends
    await settle()
    assert sink.frames == [b"".join(messages)]
    assert wire.decode_calls(sink.frames[0]) == [wire.decode_calls(m)[0] for m in messages]
    assert len(outbox) == 0
    assert (outbox.frames_sent, outbox.calls_sent) == (1, 3)


async def test_small_calls_are_framed_up_to_the_target_or_the_call_limit() -> None:
    outbox, sink = Outbox(max_calls=1024), RecordingSink()
    size = wire.FRAME_TARGET // 4
    for call_id in range(1, 10):
        outbox.put(call_id, small(call_id, size))
    outbox.attach(sink)
    assert [len(frame) // size for frame in sink.frames] == [4, 4, 1]
    limited, sink = Outbox(max_calls=2), RecordingSink()
    for call_id in range(1, 6):
        limited.put(call_id, small(call_id))
    limited.attach(sink)
    assert [len(wire.decode_calls(frame)) for frame in sink.frames] == [2, 2, 1]


async def test_a_large_call_travels_alone_after_a_frame_of_small_ones() -> None:
    outbox, sink = Outbox(max_calls=1024), RecordingSink()
    large = small(1, wire.LARGE_CALL + 1)
    outbox.put(1, large)
    outbox.put(2, small(2))
    outbox.put(3, small(3))
    outbox.attach(sink)
    assert sink.frames == [small(2) + small(3), large]
    assert (outbox.frames_sent, outbox.calls_sent) == (2, 3)


async def test_nothing_leaves_while_paused_and_everything_once_writable() -> None:
    outbox, sink = Outbox(max_calls=1024), RecordingSink()
    outbox.attach(sink)
    sink.paused = True
    outbox.put(1, small(1))
    await settle()
    assert sink.frames == [] and len(outbox) == 1
    assert (outbox.frames_sent, outbox.calls_sent) == (0, 0)  # counted as they leave, not as they wait
    sink.paused = False
    outbox.flush()  # what the channel's resume_writing leads to
    assert sink.frames == [small(1)]


async def test_a_discarded_call_never_leaves_and_detach_forgets_all() -> None:
    outbox, sink = Outbox(max_calls=1024), RecordingSink()
    outbox.put(1, small(1))
    outbox.put(2, small(2))
    outbox.discard(1)
    outbox.attach(sink)
    assert sink.frames == [small(2)]
    outbox.put(3, small(3))
    outbox.detach()
    await settle()
    assert sink.frames == [small(2)] and len(outbox) == 0
