"""This node's own storage as a replica: the same interface as a peer, answered synchronously."""

from __future__ import annotations

import asyncio
import time

from kvnode.metrics import CallMeter
from kvnode.records import CorruptRecord, Record
from kvnode.replica.errors import ReplicaRejected
from kvnode.storage import Storage, StorageError

__all__ = ["LocalReplica"]


class LocalReplica:
    """Create it inside the running event loop."""

    connected = True

    def __init__(self, url: str, storage: Storage) -> None:
        self.url = url
        self._storage = storage
        self._loop = asyncio.get_running_loop()
        self.meter = CallMeter()

    def down_for(self) -> float:
        return 0.0

    def speculative_delay(self) -> float:
        return 0.0  # answers synchronously: its future is done when the call returns

    def read(self, key: bytes) -> asyncio.Future[Record | None]:
        future: asyncio.Future[Record | None] = self._loop.create_future()
        start = time.perf_counter()
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
            held = self._storage.apply(key, record)
        except StorageError as error:
            future.set_exception(ReplicaRejected(f"{self.url}: {error}"))
            outcome = "rejected"
        else:
            future.set_result(None if held == record else held.timestamp)
            outcome = "ok"
        self.meter.ended("write", outcome, time.perf_counter() - start)
        return future
