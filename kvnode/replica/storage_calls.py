"""The replica calls answered from this node's storage: READ, FETCH, WRITE, DELETE and SCAN, registered
with the channel's server end (kvnode.replica.channel.answerers) when the node is wired.

A frame's writes join the event loop iteration's group commit (Storage.offer), and the frame is answered
once that commit stored them (the answerers' after-frame hook), so its replies wait for no other loop
turn; if the commit fails, every call of the frame is answered FAILED. Every record received moves this
node's clock past its timestamp, unless it is stamped beyond the maximum skew ahead of the cluster's time
as this node best knows it (kvnode.clocks.fence): such a record is refused (REFUSED), not stored. While
this node's data is not whole (kvnode.healing.rebuild_state), a READ is answered NOT_READY; a FETCH,
anti-entropy's read, is answered as ever.
"""

from __future__ import annotations

from collections.abc import Callable

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock
from kvnode.replica import pages
from kvnode.replica.apply import apply_record
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answer, Answerers
from kvnode.replica.readiness import NodeState
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record, decode

__all__ = ["StorageCalls"]

# Named once: naming an enum member is a class attribute lookup each time, and these answerers run for
# every call a peer sends.
_READ = wire.Op.READ
_SERVING = NodeState.SERVING
_FOUND, _NEWER, _REFUSED = wire.Status.FOUND, wire.Status.NEWER, wire.Status.REFUSED
_ABSENT: Answer = (wire.Status.ABSENT, b"")
_STORED: Answer = (wire.Status.STORED, b"")
_NOT_READY: Answer = (wire.Status.NOT_READY, b"")


class StorageCalls:
    """How this node answers a peer's reads, writes and scans: from its storage, a received record moving
    its clock and passing its fence, a read answered only while its data is whole."""

    __slots__ = ("_clock", "_fence", "_node_state", "_storage")

    def __init__(
        self, storage: Storage, clock: HybridClock, fence: ClockFence, node_state: Callable[[], NodeState]
    ) -> None:
        self._storage = storage
        self._clock = clock
        self._fence = fence
        self._node_state = node_state

    def register(self, answerers: Answerers) -> None:
        for op, answerer in (
            (wire.Op.READ, self.read),
            (wire.Op.FETCH, self.read),
            (wire.Op.WRITE, self.write),
            (wire.Op.DELETE, self.delete),
            (wire.Op.SCAN, self.scan),
        ):
            answerers.register(op, answerer)
        answerers.after_frame(self._storage.commit)  # this frame's writes, or another's a read here saw

    def read(self, call: wire.CallRequest) -> Answer:
        """A READ, not answered while this node's data is not whole; a FETCH (anti-entropy's), answered
        always. A pending write (earlier in the frame, say) is seen: the frame is answered after it is
        stored."""
        if call.op is _READ and self._node_state() is not _SERVING:
            return _NOT_READY
        found = self._storage.read_encoded(call.key)
        return _ABSENT if found is None else (_FOUND, found)

    def write(self, call: wire.CallRequest) -> Answer:
        return self._store(call.key, decode(call.record), call.record)  # stored as it came: not encoded again

    def delete(self, call: wire.CallRequest) -> Answer:
        """A tombstone, as protocol version 2 sends it (kvnode.replica.channel.protocol.write_call)."""
        return self._store(call.key, wire.decode_delete(call.record))

    def _store(self, key: bytes, record: Record, encoded: bytes | None = None) -> Answer:
        refused, newer = apply_record(self._storage.offer, self._fence, key, record, encoded)
        if refused:
            return _REFUSED, refused.encode()
        self._clock.observe(record.timestamp)  # a version received moves this node's clock past it
        return _STORED if newer is None else (_NEWER, wire.encode_timestamp(newer))

    def scan(self, call: wire.CallRequest) -> Answer:
        """A page of this node's versions from the call's key on (a cluster-wide scan:
        kvnode.coordinator.scan); answered while the node rebuilds too, since the scan merges every owner's
        versions."""
        entries, more = pages.read_page(self._storage, call.key, pages.decode_scan_request(call.record))
        return wire.Status.RECORDS, pages.encode_page(entries, more)
