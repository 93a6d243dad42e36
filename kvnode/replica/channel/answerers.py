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

    >>> answerers = Answerers()
    >>> answerers.register(wire.Op.CLOCK, lambda call: (wire.Status.CLOCK, b"now"))
    >>> replies = answerers.answer_frame([wire.CallRequest(1, wire.Op.CLOCK, b"", b""),
    ...                                   wire.CallRequest(2, wire.Op.READ, b"k", b"")])
    >>> [(reply.status.name, reply.payload) for reply in wire.decode_replies(b"".join(replies))]
    [('CLOCK', b'now'), ('FAILED', b'this node answers no READ')]
"""

from __future__ import annotations

from collections.abc import Callable

from kvnode.figures import Figure, Figures, Kind
from kvnode.replica.channel import wire
from kvnode.replica.channel.protocol import PROTOCOL
from kvnode.storage.keyspace import StorageError

__all__ = ["ANSWERED_FIGURES", "Answer", "Answerer", "Answerers", "Unanswerable"]

Answer = tuple[wire.Status, bytes]
Answerer = Callable[[wire.CallRequest], Answer]


class Unanswerable(Exception):
    """An answerer cannot answer this call, now or ever: the call fails (FAILED) with this reason."""


class Answerers:
    """The answerers of this node's replica calls, by op, and the hooks a frame's replies wait for; the
    frames and calls answered since start."""

    __slots__ = ("_after_frame", "_by_op", "calls", "frames")

    def __init__(self) -> None:
        self._by_op: dict[wire.Op, Answerer] = {}
        self._after_frame: list[Callable[[], None]] = []
        self.frames = 0
        self.calls = 0

    def register(self, op: wire.Op, answerer: Answerer) -> None:
        """Answer ``op`` with ``answerer``; one answerer an op, and only an op of the protocol table."""
        if op not in PROTOCOL or op in self._by_op:
            raise ValueError(f"{op.name} already has an answerer, or is not in the protocol table")
        self._by_op[op] = answerer

    def after_frame(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once a frame's calls are answered, before their replies leave; a StorageError it
        raises fails every call of the frame."""
        self._after_frame.append(hook)

    @property
    def unanswered(self) -> frozenset[wire.Op]:
        """The protocol's ops that no answerer was registered for (a wired node has none)."""
        return frozenset(PROTOCOL) - self._by_op.keys()

    def answer_frame(self, calls: list[wire.CallRequest]) -> list[bytes]:
        """The replies to one frame's calls, in order, once the hooks have run."""
        self.frames += 1
        self.calls += len(calls)
        replies = [self._reply(call) for call in calls]
        try:
            for hook in self._after_frame:
                hook()
        except StorageError as error:
            reason = str(error).encode()
            return [wire.encode_reply(call.call_id, wire.Status.FAILED, reason) for call in calls]
        return replies

    def _reply(self, call: wire.CallRequest) -> bytes:
        answerer = self._by_op.get(call.op)
        if answerer is None:
            return wire.encode_reply(
                call.call_id, wire.Status.FAILED, f"this node answers no {call.op.name}".encode()
            )
        try:
            status, payload = answerer(call)
        except (ValueError, Unanswerable, StorageError) as error:
            return wire.encode_reply(call.call_id, wire.Status.FAILED, str(error).encode())
        return wire.encode_reply(call.call_id, status, payload)


# An Answerers' figures (kvnode.figures): the peers' frames as this node's server end answered them.
ANSWERED_FIGURES = Figures("answered", (
    Figure("frames", Kind.COUNTER, "Frames of replica calls this node answered, from every peer (calls per "
           "frame: kvnode_replica_calls_answered_total over this)", "kvnode_replica_frames_answered"),
    Figure("calls", Kind.COUNTER, "Replica calls this node answered, in those frames",
           "kvnode_replica_calls_answered"),
))  # fmt: skip
