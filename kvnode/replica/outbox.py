"""The calls to one peer encoded and waiting to be sent, and how they are framed.

The calls of one event-loop tick leave together: small ones in frames of about ``wire.FRAME_TARGET``
bytes (at most ``max_calls`` a frame), a large one (a big value, over ``wire.LARGE_CALL``) in a frame of
its own after a frame of small ones, so a big value holds small calls up no longer than one frame. While
the transport's write buffer is full (the sink is paused) calls wait here; the sink's ``writable`` sends
them once it drains. It counts the frames and the calls it sent (``kvnode_peer_frames_sent_total``,
``kvnode_peer_calls_sent_total``: their ratio is how well a tick's calls are batched; docs/metrics.md).

Create it inside the running event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Protocol

from kvnode.replica.channel import wire

__all__ = ["FrameSink", "Outbox"]


class FrameSink(Protocol):
    """Where frames go: a connected replica channel."""

    @property
    def paused(self) -> bool:
        """The transport's write buffer is over its high-water mark."""
        ...

    def send(self, payload: bytes) -> None: ...


class Outbox:
    """Encoded calls by id, in call order; sent at the end of the tick they were put in, while a sink is
    attached and not paused; ``frames_sent`` and ``calls_sent`` count what left, since it was made."""

    def __init__(self, max_calls: int) -> None:
        self._max_calls = max_calls
        self._loop = asyncio.get_running_loop()
        self._small: dict[int, bytes] = {}
        self._large: dict[int, bytes] = {}
        self._sink: FrameSink | None = None
        self._flush_scheduled = False
        self.frames_sent = 0
        self.calls_sent = 0

    def __len__(self) -> int:
        return len(self._small) + len(self._large)

    def put(self, call_id: int, message: bytes) -> None:
        """Queue an encoded call; it leaves at the end of this tick if a sink is attached."""
        (self._large if len(message) > wire.LARGE_CALL else self._small)[call_id] = message
        if self._sink is not None and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def discard(self, call_id: int) -> None:
        """Forget a call not yet sent (it timed out)."""
        self._small.pop(call_id, None)
        self._large.pop(call_id, None)

    def attach(self, sink: FrameSink) -> None:
        """Send through ``sink`` from now on, starting with what waits."""
        self._sink = sink
        self.flush()

    def detach(self) -> None:
        """The sink is gone: forget it and every call waiting (their futures are failed elsewhere)."""
        self._sink = None
        self._small.clear()
        self._large.clear()

    def flush(self) -> None:
        """Send what waits, until the sink is paused: a frame of small calls, then one large call, and
        again."""
        self._flush_scheduled = False
        sink, small, large = self._sink, self._small, self._large
        if sink is None:
            return
        limit = self._max_calls
        while (small or large) and not sink.paused:
            if small:
                frame, size = [], 0
                for message in small.values():
                    frame.append(message)
                    size += len(message)
                    if size >= wire.FRAME_TARGET or len(frame) == limit:
                        break
                for call_id in list(itertools.islice(small, len(frame))):
                    del small[call_id]
                sink.send(b"".join(frame))
                self.frames_sent += 1
                self.calls_sent += len(frame)
            if large and not sink.paused:
                call_id = next(iter(large))
                sink.send(large.pop(call_id))
                self.frames_sent += 1
                self.calls_sent += 1
