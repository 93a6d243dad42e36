"""How this node answers a peer's calls from its storage: one answerer a call of the replica protocol
(:data:`ANSWERERS`), and a frame's calls answered together (:meth:`CallAnswers.answer_calls`).

Every record received moves this node's clock past its timestamp, unless it is stamped beyond the maximum
skew ahead of the cluster's time as this node best knows it (kvnode.clocks.fence): such a record is refused
(REFUSED), not stored. A CLOCK call is answered with this node's wall clock and the state of its data,
and anti-entropy's calls from this node's summaries and store (kvnode.healing.answers). While this node's
data is not whole (kvnode.healing.rebuild_state), a READ is answered NOT_READY; a FETCH, anti-entropy's
read, is answered as ever. The channel's server end (kvnode.node.peer_api) hands each frame's calls here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock
from kvnode.cluster.members import NotAdopted
from kvnode.healing import answers as repair_answers
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.replica import pages, wire
from kvnode.replica.apply import apply_record
from kvnode.replica.readiness import NodeState
from kvnode.storage.keyspace import Storage, StorageError, WriteBatch
from kvnode.storage.records import Record, decode
from kvnode.topology.membership import Membership

__all__ = ["ANSWERERS", "Answer", "CallAnswers"]


@dataclass(frozen=True, slots=True)
class CallAnswers:
    """How this node answers a peer's calls: the clock a received record moves, the fence it must pass,
    the summaries anti-entropy's calls read, and the state of this node's data (whether it may answer a
    read)."""

    clock: HybridClock
    fence: ClockFence
    summaries: SummaryUpkeep
    node_state: Callable[[], NodeState]
    membership: Callable[[], Membership]  # the one the node runs with
    adopt: Callable[[Membership], None]  # run with a newer one (kvnode.cluster.members.Members.adopt)

    def clock_now(self) -> bytes:
        """A CLOCK reply's payload: this node's wall clock now, and the state of its data."""
        return wire.encode_clock(self.fence.wall_us(), self.node_state())

    def answer_calls(self, storage: Storage, calls: list[wire.CallRequest]) -> list[bytes]:
        """The replies to one frame's calls, in order, once their writes are stored: with the others
        pending in this loop iteration (this node's own as coordinator), in one LevelDB write (a group
        commit), before the frame is answered, so that its replies wait for no other loop turn. If that
        write fails, every call of the frame is answered FAILED."""
        batch = storage.batch()
        replies = [self._reply(storage, batch, call) for call in calls]
        try:
            storage.commit()  # this frame's writes, or another's that a read here may have seen
        except StorageError as error:
            reason = str(error).encode()
            return [wire.encode_reply(call.call_id, wire.Status.FAILED, reason) for call in calls]
        return replies

    def _reply(self, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> bytes:
        """One call answered by its op's answerer (ANSWERERS); a call that cannot be answered is FAILED."""
        try:
            status, payload = ANSWERERS[call.op](self, storage, batch, call)
        except (ValueError, NotAdopted, StorageError, repair_answers.NotAnswerable) as error:
            return wire.encode_reply(call.call_id, wire.Status.FAILED, str(error).encode())
        return wire.encode_reply(call.call_id, status, payload)


Answer = tuple[wire.Status, bytes]
Answerer = Callable[[CallAnswers, Storage, WriteBatch, wire.CallRequest], Answer]

# Named once: naming an enum member is a class attribute lookup each time, and the answerers below run for
# every call a peer sends.
_READ = wire.Op.READ
_SERVING = NodeState.SERVING
_FOUND, _NEWER, _REFUSED = wire.Status.FOUND, wire.Status.NEWER, wire.Status.REFUSED
_ABSENT: Answer = (wire.Status.ABSENT, b"")
_STORED: Answer = (wire.Status.STORED, b"")
_NOT_READY: Answer = (wire.Status.NOT_READY, b"")


def _read(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    """A READ, not answered while this node's data is not whole; a FETCH (anti-entropy's), answered always.
    Read through the frame's batch: a write earlier in the frame is seen."""
    if call.op is _READ and answers.node_state() is not _SERVING:
        return _NOT_READY
    found = batch.read_encoded(call.key)
    return _ABSENT if found is None else (_FOUND, found)


def _write(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    return _store(answers, batch, call.key, decode(call.record))


def _delete(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    """A tombstone, as protocol version 2 sends it (kvnode.replica.protocol.write_call)."""
    return _store(answers, batch, call.key, wire.decode_delete(call.record))


def _store(answers: CallAnswers, batch: WriteBatch, key: bytes, record: Record) -> Answer:
    refused, newer = apply_record(batch, answers.fence, key, record)
    if refused:
        return _REFUSED, refused.encode()
    answers.clock.observe(record.timestamp)  # a version received moves this node's clock past it
    return _STORED if newer is None else (_NEWER, wire.encode_timestamp(newer))


def _clock(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    return wire.Status.CLOCK, answers.clock_now()


def _membership(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    return wire.Status.MEMBERSHIP, answers.membership().encode()


def _adopt(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    offered = Membership.decode(call.record)
    if offered != answers.membership():  # the same one again: a change resumed after a crash
        answers.adopt(offered)
    return wire.Status.STORED, b""


def _repair(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    """One of anti-entropy's calls (kvnode.healing.answers)."""
    return repair_answers.answer(storage, answers.summaries, call)


def _scan(answers: CallAnswers, storage: Storage, batch: WriteBatch, call: wire.CallRequest) -> Answer:
    """A page of this node's versions from the call's key on (a cluster-wide scan: kvnode.coordinator.scan);
    answered while the node rebuilds too, since the scan merges every owner's versions."""
    entries, more = pages.read_page(storage, call.key, pages.decode_scan_request(call.record))
    return wire.Status.RECORDS, pages.encode_page(entries, more)


# One answerer a call of the replica protocol (kvnode.replica.protocol.PROTOCOL, which says the statuses each
# may answer with); tests/unit/kvnode/node/test_peer_answers.py checks that the two cover the same calls.
ANSWERERS: dict[wire.Op, Answerer] = {
    wire.Op.READ: _read,
    wire.Op.FETCH: _read,
    wire.Op.WRITE: _write,
    wire.Op.DELETE: _delete,
    wire.Op.CLOCK: _clock,
    wire.Op.MEMBERSHIP: _membership,
    wire.Op.ADOPT: _adopt,
    wire.Op.BRANCHES: _repair,
    wire.Op.SEGMENTS: _repair,
    wire.Op.LIST: _repair,
    wire.Op.SCAN: _scan,
}
