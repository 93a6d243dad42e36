"""This node's own storage as a replica: the same interface as a peer, answered before the call returns.

Like a peer, it refuses a record stamped beyond the maximum skew ahead of the cluster's time
(kvnode.clocks.fence), whether this node's own write as coordinator or a read repair from a peer. While its
data is not whole (kvnode.healing.rebuild_state), it takes writes but answers reads "not ready"."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kvnode.clocks.fence import ClockFence
from kvnode.metrics import CallMeter
from kvnode.replica import Answered, AwaitableCalls
from kvnode.replica.apply import apply_record
from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaNotReady,
    ReplicaRejected,
    ReplicaSkewRefused,
    outcome,
)
from kvnode.replica.readiness import NodeState
from kvnode.storage.keyspace import Storage, StorageError, StorageFull
from kvnode.storage.records import CorruptRecord, Record

__all__ = ["LocalReplica"]


class LocalReplica(AwaitableCalls):
    """Create it inside the running event loop."""

    connected = True
    suspected = False

    def __init__(
        self,
        url: str,
        storage: Storage,
        fence: ClockFence,
        node_state: Callable[[], NodeState] = lambda: NodeState.SERVING,
    ) -> None:
        self.url = url
        self._storage = storage
        self._fence = fence
        self._node_state = node_state
        self._loop = asyncio.get_running_loop()
        self.meter = CallMeter()

    def down_for(self) -> float:
        return 0.0

    def speculative_delay(self) -> float:
        return 0.0  # answers before the call returns

    def read_then(self, key: bytes, answered: Answered[Record | None]) -> None:
        start = time.perf_counter()
        state = self._node_state()
        if state is not NodeState.SERVING:
            self.meter.ended("read", "not_ready", time.perf_counter() - start)
            answered(ReplicaNotReady(f"{self.url} is {state}: its data is not whole yet"), None)
            return
        try:
            record = self._storage.read(key)
        except (StorageError, CorruptRecord) as error:
            self.meter.ended("read", "rejected", time.perf_counter() - start)
            answered(ReplicaRejected(f"{self.url}: {error}"), None)
            return
        self.meter.ended("read", "ok", time.perf_counter() - start)
        answered(None, record)

    def write_then(self, key: bytes, record: Record, answered: Answered[int | None]) -> None:
        start = time.perf_counter()
        error: ReplicaError | None = None
        newer: int | None = None
        try:
            applied = apply_record(self._storage, self._fence, key, record)
            if applied.refused:
                error = ReplicaSkewRefused(f"{self.url}: {applied.refused}")
            else:
                newer = applied.newer
        except StorageFull as full:
            error = ReplicaDiskFull(f"{self.url}: {full}")
        except StorageError as failed:
            error = ReplicaRejected(f"{self.url}: {failed}")
        self.meter.ended("write", outcome(error), time.perf_counter() - start)
        answered(error, newer)
