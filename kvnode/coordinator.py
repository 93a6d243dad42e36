"""The coordinator: turns a client's GET/PUT/DELETE into replica calls and a quorum verdict.

It picks the key's replicas (placement), stamps writes with its clock, hands the calls to the fan-out
strategy the node runs with, and merges read answers: the newest version wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from kvnode.clock import WriteClock
from kvnode.fanout import Fanout
from kvnode.placement import Placement
from kvnode.quorum import Quorum
from kvnode.records import Record, newest
from kvnode.transport import Replica

__all__ = ["Coordinator"]


class Coordinator:
    def __init__(
        self, placement: Placement, replicas: Mapping[str, Replica], fanout: Fanout, clock: WriteClock
    ) -> None:
        self.placement = placement
        self._replicas = replicas
        self._fanout = fanout
        self._clock = clock

    @property
    def cluster_size(self) -> int:
        return len(self.placement)

    async def get(self, key: bytes, quorum: Quorum) -> Record | None:
        """The newest version among ack replicas (a tombstone included); None where none holds the key."""
        replicas = self._replicas_for(key, quorum)
        return newest(await self._fanout([partial(replica.read, key) for replica in replicas], quorum))

    async def put(self, key: bytes, value: bytes, quorum: Quorum) -> None:
        await self._write(key, Record.put(self._clock.now(), value), quorum)

    async def delete(self, key: bytes, quorum: Quorum) -> None:
        await self._write(key, Record.delete(self._clock.now()), quorum)

    async def _write(self, key: bytes, record: Record, quorum: Quorum) -> None:
        replicas = self._replicas_for(key, quorum)
        await self._fanout([partial(replica.write, key, record) for replica in replicas], quorum)

    def _replicas_for(self, key: bytes, quorum: Quorum) -> list[Replica]:
        return [self._replicas[url] for url in self.placement.replicas_for(key, quorum.replicas)]
