"""The server end's calls: one answerer an op, each registered by the part of the node that owns what the
op asks (kvnode.node.wiring registers them all), and a frame's calls answered together.

The client end's mirror is the peer's calls in flight (kvnode.replica.inflight), which the protocol table
resolves (kvnode.replica.channel.protocol). Here a frame's calls are answered in order, then the hooks run
that must before any reply leaves (storage's group commit: the writes of the frame, with the others pending
in this loop iteration, in one LevelDB write); a hook that fails fails every call of the frame, since none
of their writes may be acknowledged. An answerer answers with a status of its op's row in the table, or
fails the call with a one-line reason: :class:`Unanswerable`, a malformed call (ValueError: a payload that
does not decode), or storage refusing (StorageError). The frames and calls answered are counted
(``ANSWERED_FIGURES``: calls per frame, the batching seen from this end).

One op is answered later than its frame: a FORWARD (kvnode.coordinator.forwarding) waits for the writes it
relays to other nodes. Its answerer is *deferred* (:meth:`Answerers.register_deferred`): started once the
frame's hooks have run, it is handed a ``reply`` to call when its answer is known, whose reply goes out
through the channel's :class:`LateReplies`; the client end settles calls by id, in any order. A frame of
synchronous calls is answered exactly as before: a deferred op is looked up only when no synchronous
answerer has it, and a frame costs one more test (whether any call of it was deferred).

    >>> answerers = Answerers()
    >>> answerers.register(wire.Op.CLOCK, lambda call: (wire.Status.CLOCK, b"now"))
    >>> replies = answerers.answer_frame([wire.CallRequest(1, wire.Op.CLOCK, b"", b""),
    ...                                   wire.CallRequest(2, wire.Op.READ, b"k", b"")])
    >>> [(reply.status.name, reply.payload) for reply in wire.decode_replies(b"".join(replies))]
    [('CLOCK', b'now'), ('FAILED', b'this node answers no READ')]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from kvnode.figures import Figure, Figures, Kind
from kvnode.replica.channel import wire
from kvnode.replica.channel.protocol import PROTOCOL
from kvnode.storage.keyspace import StorageError

__all__ = [
    "ANSWERED_FIGURES",
    "Answer",
    "Answerer",
    "Answerers",
    "DeferredAnswerer",
    "LateReplies",
    "Reply",
    "Unanswerable",
]

log = logging.getLogger(__name__)

Answer = tuple[wire.Status, bytes]
Answerer = Callable[[wire.CallRequest], Answer]
Reply = Callable[[wire.Status, bytes], None]  # a deferred call's answer, or a part of it (protocol.Part)
DeferredAnswerer = Callable[[wire.CallRequest, Reply], None]


class Unanswerable(Exception):
    """An answerer cannot answer this call, now or ever: the call fails (FAILED) with this reason."""


class Answerers:
    """The answerers of this node's replica calls, by op, and the hooks a frame's replies wait for; the
    frames and calls answered since start."""

    __slots__ = ("_after_frame", "_by_op", "_deferred", "_deferring", "calls", "frames")

    def __init__(self) -> None:
        self._by_op: dict[wire.Op, Answerer] = {}
        self._deferred: dict[wire.Op, DeferredAnswerer] = {}
        self._deferring: list[wire.CallRequest] = []  # the frame's deferred calls, started after its hooks
        self._after_frame: list[Callable[[], None]] = []
        self.frames = 0
        self.calls = 0

    def register(self, op: wire.Op, answerer: Answerer) -> None:
        """Answer ``op`` with ``answerer``; one answerer an op, and only an op of the protocol table."""
        self._check_new(op)
        self._by_op[op] = answerer

    def register_deferred(self, op: wire.Op, answerer: DeferredAnswerer) -> None:
        """Answer ``op`` later than its frame: ``answerer(call, reply)`` starts it, and ``reply(status,
        payload)`` answers it once known; a ValueError, Unanswerable or StorageError it raises as it starts
        fails the call as a synchronous answerer's does."""
        self._check_new(op)
        self._deferred[op] = answerer

    def _check_new(self, op: wire.Op) -> None:
        if op not in PROTOCOL or op in self._by_op or op in self._deferred:
            raise ValueError(f"{op.name} already has an answerer, or is not in the protocol table")

    def after_frame(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once a frame's calls are answered, before their replies leave; a StorageError it
        raises fails every call of the frame."""
        self._after_frame.append(hook)

    @property
    def unanswered(self) -> frozenset[wire.Op]:
        """The protocol's ops that no answerer was registered for (a wired node has none)."""
        return frozenset(PROTOCOL) - self._by_op.keys() - self._deferred.keys()

    def answer_frame(
        self, calls: list[wire.CallRequest], late: Callable[[bytes], None] | None = None
    ) -> list[bytes]:
        """The replies to one frame's calls, in order, once the hooks have run; a deferred call's is b""
        there, and comes through ``late`` (a channel's :class:`LateReplies`) once known. Without ``late``
        a deferred call fails (FAILED, among the frame's replies)."""
        self.frames += 1
        self.calls += len(calls)
        replies = [self._reply(call) for call in calls]
        try:
            for hook in self._after_frame:
                hook()
        except StorageError as error:
            self._deferring.clear()  # failed with the frame, never started
            reason = str(error).encode()
            return [wire.encode_reply(call.call_id, wire.Status.FAILED, reason) for call in calls]
        if self._deferring:
            self._start_deferred(replies, late)
        return replies

    def _reply(self, call: wire.CallRequest) -> bytes:
        answerer = self._by_op.get(call.op)
        if answerer is None:
            return self._defer(call)
        try:
            status, payload = answerer(call)
        except (ValueError, Unanswerable, StorageError) as error:
            return _failed(call, str(error))
        return wire.encode_reply(call.call_id, status, payload)

    def _defer(self, call: wire.CallRequest) -> bytes:
        """A call no synchronous answerer has: kept for after the frame's hooks if a deferred one has it
        (its place among the replies empty), else failed."""
        if call.op not in self._deferred:
            return _failed(call, f"this node answers no {call.op.name}")
        self._deferring.append(call)
        return b""

    def _start_deferred(self, replies: list[bytes], late: Callable[[bytes], None] | None) -> None:
        deferring, self._deferring = self._deferring, []
        for call in deferring:
            if late is None:
                replies.append(_failed(call, "this channel answers no call after its frame"))
                continue
            try:
                self._deferred[call.op](call, partial(_reply_late, late, call.call_id))
            except (ValueError, Unanswerable, StorageError) as error:
                late(_failed(call, str(error)))


def _failed(call: wire.CallRequest, reason: str) -> bytes:
    return wire.encode_reply(call.call_id, wire.Status.FAILED, reason.encode())


def _reply_late(late: Callable[[bytes], None], call_id: int, status: wire.Status, payload: bytes) -> None:
    late(wire.encode_reply(call_id, status, payload))


class LateReplies:
    """One channel's replies answered after their frame (deferred calls'), sent by ``send`` (the server's,
    which frames replies as it frames a frame's): those told in one turn of the loop leave together, from
    one task that lives while some wait, not one a reply. Once the channel ends (``close``) they are
    dropped: the peer's calls fail on its side. Create it inside the running event loop."""

    __slots__ = ("_closed", "_send", "_sender", "_waiting")

    def __init__(self, send: Callable[[list[bytes]], Awaitable[None]]) -> None:
        self._send = send
        self._waiting: list[bytes] = []
        self._sender: asyncio.Task[None] | None = None
        self._closed = False

    def __call__(self, reply: bytes) -> None:
        if self._closed:
            return
        self._waiting.append(reply)
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._send_waiting())

    async def _send_waiting(self) -> None:
        try:
            while self._waiting:
                replies, self._waiting = self._waiting, []
                await self._send(replies)
        except ConnectionError:  # the channel is going: its replies with it
            log.info("a late reply's channel closed before it was sent")
            self._waiting.clear()
        finally:
            self._sender = None

    async def close(self) -> None:
        """The channel has ended: drop what waits, and wait for the send under way to end."""
        self._closed = True
        self._waiting.clear()
        sender = self._sender
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender


# An Answerers' figures (kvnode.figures): the peers' frames as this node's server end answered them.
ANSWERED_FIGURES = Figures("answered", (
    Figure("frames", Kind.COUNTER, "Frames of replica calls this node answered, from every peer (calls per "
           "frame: kvnode_replica_calls_answered_total over this)", "kvnode_replica_frames_answered"),
    Figure("calls", Kind.COUNTER, "Replica calls this node answered, in those frames",
           "kvnode_replica_calls_answered"),
))  # fmt: skip
