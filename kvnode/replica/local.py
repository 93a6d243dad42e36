"""This node's own storage as a replica: the same interface as a peer, answered synchronously.

Like a peer, it refuses a record stamped beyond the maximum skew ahead of the cluster's time
(kvnode.clocks.fence), whether this node's own write as coordinator or a read repair from a peer. While its
data is not whole (kvnode.healing.rebuild_state), it takes writes but answers reads "not ready"."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kvnode.clocks.fence import ClockFence
from kvnode.metrics import CallMeter
from kvnode.replica.apply import apply_record
from kvnode.replica.errors import ReplicaDiskFull, ReplicaNotReady, ReplicaRejected, ReplicaSkewRefused
from kvnode.replica.readiness import NodeState
from kvnode.storage.keyspace import Storage, StorageError, StorageFull
from kvnode.storage.records import CorruptRecord, Record

__all__ = ["LocalReplica"]


class LocalReplica:
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
        return 0.0  # answers synchronously: its future is done when the call returns

    def read(self, key: bytes) -> asyncio.Future[Record | None]:
        future: asyncio.Future[Record | None] = self._loop.create_future()
        start = time.perf_counter()
        state = self._node_state()
        if state is not NodeState.SERVING:
            future.set_exception(ReplicaNotReady(f"{self.url} is {state}: its data is not whole yet"))
            self.meter.ended("read", "not_ready", time.perf_counter() - start)
            return future
        try:
            future.set_result(self._storage.read(key))
            outcome = "ok"
        except (StorageError, CorruptRecord) as error:
            future.set_exception(ReplicaRejected(f"{self.url}: {error}"))
            outcome = "rejected"
        self.meter.ended("read", outcome, time.perf_counter() - start)
        return future

    def write(self, key: bytes, record: Record) -> asyncio.Future[int | None]:
        future: asyncio.Future[int | None] = self._loop.create_future()
        start = time.perf_counter()
        try:
            applied = apply_record(self._storage, self._fence, key, record)
        except StorageFull as error:
            future.set_exception(ReplicaDiskFull(f"{self.url}: {error}"))
            outcome = "disk_full"
        except StorageError as error:
            future.set_exception(ReplicaRejected(f"{self.url}: {error}"))
            outcome = "rejected"
        else:
            if applied.refused:
                future.set_exception(ReplicaSkewRefused(f"{self.url}: {applied.refused}"))
                outcome = "skew_refused"
            else:
                future.set_result(applied.newer)
                outcome = "ok"
        self.meter.ended("write", outcome, time.perf_counter() - start)
        return future
