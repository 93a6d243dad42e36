"""This node's own storage as a replica: the same interface as a peer, answered within the event loop's
iteration: a write (and a read of it) once the iteration's group commit has stored it
(kvnode.storage.group_commit).

Like a peer, it refuses a record stamped beyond the maximum skew ahead of the cluster's time
(kvnode.clocks.fence), whether this node's own write as coordinator or a read repair from a peer. While its
data is not whole (kvnode.healing.rebuild_state), it takes writes but answers reads "not ready"."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

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

T = TypeVar("T")


class LocalReplica(AwaitableCalls):
    """Create it inside the running event loop."""

    connected = True
    lagging = False
    forwarder = None  # this node's own writes are never forwarded

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
        return 0.0  # answers within the loop iteration: no peer's round trip to wait for

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
        if self._storage.is_pending(key):  # never answer a version that may yet fail to be stored
            self._storage.when_written(partial(self._answer, "read", answered, record, start))
        else:
            self._answer("read", answered, record, start, None)

    def write_then(
        self, key: bytes, record: Record, answered: Answered[int | None], encoded: bytes | None = None
    ) -> None:
        start = time.perf_counter()
        try:
            applied = apply_record(self._storage.offer, self._fence, key, record, encoded)
        except StorageError as failed:  # the version held could not be read
            self._answer("write", answered, None, start, failed)
            return
        if applied.refused:
            self.meter.ended("write", "skew_refused", time.perf_counter() - start)
            answered(ReplicaSkewRefused(f"{self.url}: {applied.refused}"), None)
        elif self._storage.is_pending(key):  # acknowledged once the group commit has stored it
            self._storage.when_written(partial(self._answer, "write", answered, applied.newer, start))
        else:  # an older version, lost to the stored one
            self._answer("write", answered, applied.newer, start, None)

    def _answer(
        self, op: str, answered: Answered[T], answer: T, start: float, failure: Exception | None
    ) -> None:
        """Tell a call its answer, or the replica error a failed storage is."""
        error: ReplicaError | None = None
        if failure is not None:
            error = (ReplicaDiskFull if isinstance(failure, StorageFull) else ReplicaRejected)(
                f"{self.url}: {failure}"
            )
        self.meter.ended(op, "ok" if error is None else outcome(error), time.perf_counter() - start)
        answered(error, answer)
