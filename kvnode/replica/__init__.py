"""The replica layer: how a coordinator reaches the replicas of a key, and how this node answers as one.

A replica call is started with a callback, :data:`Answered`, told its outcome once: the replica's answer or
one of the :mod:`~kvnode.replica.errors`; nothing else reaches the coordinator. The request path takes the
outcome so, straight from the reply's decoding (no Future and no scheduled callback per call); the rest of
the node awaits ``read`` and ``write``, which return an ``asyncio.Future`` built on the same call
(:func:`answer_future`).

    errors      the named ways a call fails
    local       this node's own storage as a replica
    apply       the one way a given version is stored: judged by the clock fence, written if newer
    storage_calls  a peer's reads, writes and scans answered from this node's storage
    readiness   whether a replica's data is whole
    pages       pages of stored versions over a key range (the cluster-wide scan's op)
    peer        another node, over one persistent multiplexed channel: connect attempts, heartbeat, calls
    peer_figures  a peer's figures, as /metrics and /v0/cluster show them
    peer_state  the peer's connection state and its named transitions, and whether a beat pings (pure)
    heartbeat   the peer's heartbeat timer: four beats a timeout, due together on the node's grid
    failure_detector  whether a peer is alive, as a level of suspicion: phi accrual (pure)
    attempt     one connect attempt, and how it failed
    clock_probe measuring a peer's clock over its channel, and answering a peer that measures this node's
    inflight    the calls to one peer in flight: ids, deadlines, bounds
    outbox      the calls to one peer waiting to be sent, and their framing
    channel/    the replica channel, both ends: codecs, the protocol's table of calls, client, server, and
                the server end's answerers (its own docstring lists its modules)
    hints       hinted handoff: writes a replica missed, kept durably and delivered when it is back
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeAlias, TypeVar

from kvnode.replica.errors import ReplicaError
from kvnode.storage.records import Record

__all__ = ["Answered", "AwaitableCalls", "Forwarder", "Replica", "answer_future"]

T = TypeVar("T")

# A call's outcome, told once: (None, the answer), or (the error, None). It may be told before the call
# that started it returns (a local read), or later (a peer's reply, a local write's group commit).
Answered: TypeAlias = Callable[[ReplicaError | None, T], None]


class Forwarder(Protocol):
    """A replica as a forwarder of a write to the other owners of its datacenter (a FORWARD call:
    kvnode.coordinator.forwarding)."""

    url: str

    @property
    def timeout(self) -> float:
        """Seconds a call to it waits for its answer."""
        ...

    @property
    def distance(self) -> float:
        """Its shortest recent round trip (seconds; 0 before one)."""
        ...

    def forward_then(self, key: bytes, request: bytes, answered: Answered[object]) -> None:
        """Send it a FORWARD of ``request`` (kvnode.coordinator.forwards.encode_request); ``answered`` is
        told each FORWARDING reply's payload as a ``protocol.Part``, then the FORWARDED reply's, or how the
        call failed."""
        ...


class Replica(Protocol):
    url: str

    @property
    def connected(self) -> bool:
        """Whether a call made now goes out at once (the local replica always does)."""
        ...

    @property
    def lagging(self) -> bool:
        """Connected, but quieter than its pace explains (kvnode.replica.failure_detector): asked last."""
        ...

    def speculative_delay(self) -> float:
        """How long a speculative read waits for this replica before asking one more (seconds)."""
        ...

    def down_for(self) -> float:
        """Seconds since the replica last failed with no answer in between (0 while it answers)."""
        ...

    @property
    def forwarder(self) -> Forwarder | None:
        """This replica as a forwarder of writes to its datacenter's other owners, while it can be one (a
        peer whose channel is open, speaks FORWARD and is not lagging); None otherwise, and always for
        this node's own."""
        ...

    def read_then(self, key: bytes, answered: Answered[Record | None]) -> None:
        """Read ``key``; ``answered`` is told the version the replica holds (a tombstone included) or None."""
        ...

    def write_then(
        self, key: bytes, record: Record, answered: Answered[int | None], encoded: bytes | None = None
    ) -> None:
        """Write ``record``; ``answered`` is told None when the replica took it (or already held that
        version), else the timestamp of the newer version it holds, so the coordinator learns its write
        lost. ``encoded``: the record's bytes (kvnode.storage.records.encode), when the caller has them (a
        write to several replicas encodes its record once)."""
        ...

    def read(self, key: bytes) -> asyncio.Future[Record | None]:
        """``read_then``, awaitable (:class:`AwaitableCalls`)."""
        ...

    def write(self, key: bytes, record: Record) -> asyncio.Future[int | None]:
        """``write_then``, awaitable (:class:`AwaitableCalls`)."""
        ...


class AwaitableCalls(ABC):
    """A replica's ``read`` and ``write``: its ``read_then`` and ``write_then``, each call wrapped in a
    Future (:func:`answer_future`), so the two forms are one implementation."""

    _loop: asyncio.AbstractEventLoop

    @abstractmethod
    def read_then(self, key: bytes, answered: Answered[Record | None]) -> None: ...

    @abstractmethod
    def write_then(
        self, key: bytes, record: Record, answered: Answered[int | None], encoded: bytes | None = None
    ) -> None: ...

    def read(self, key: bytes) -> asyncio.Future[Record | None]:
        return answer_future(self._loop, partial(self.read_then, key))

    def write(self, key: bytes, record: Record) -> asyncio.Future[int | None]:
        return answer_future(self._loop, partial(self.write_then, key, record))


def answer_future(loop: asyncio.AbstractEventLoop, start: Callable[[Answered[T]], None]) -> asyncio.Future[T]:
    """A call started with a callback, awaitable: ``start`` starts it with the callback that resolves the
    future returned. An outcome told after the future was cancelled (its awaiter gave up) is dropped."""
    future: asyncio.Future[T] = loop.create_future()
    start(partial(_resolve, future))
    return future


def _resolve(future: asyncio.Future[T], error: ReplicaError | None, answer: T) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(answer)
    else:
        future.set_exception(error)
