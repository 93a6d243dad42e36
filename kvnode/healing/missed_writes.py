"""The writes this node's storage refused (a full disk, an I/O error), made good once it writes again.

A coordinator's own copy that its storage refuses counts as a failed replica, but it cannot be hinted:
the hints are kept on the same disk, and no one would deliver a hint to its own node. A peer's write
refused here is hinted by that peer, but the peer may have stopped or dropped it since. So storage marks
that it refused writes (``Storage.missed``, durable across restarts, kvnode.storage.keyspace), and
:class:`MissedWrites`, once storage writes again, runs a full repair with every peer
(kvnode.healing.anti_entropy on demand): the summaries show exactly which keys differ, so it moves only
the refused writes and whatever else differs, however many there were and whether or not the node was
restarted meanwhile. The mark is cleared only once an exchange that began after the last refusal has
completed with every peer; a peer that could not be repaired with is tried again every second.
"""

from __future__ import annotations

import asyncio
import logging

from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.scheduling import Sleep, Tasks
from kvnode.storage.keyspace import Storage

__all__ = ["MissedWrites"]

log = logging.getLogger(__name__)

# How often storage is asked whether it writes again (it opens its database again once the disk has room),
# and how long after a repair that did not complete with every peer the next one starts.
_RETRY_S = 1.0


class MissedWrites:
    def __init__(self, storage: Storage, anti_entropy: AntiEntropy, *, sleep: Sleep = asyncio.sleep) -> None:
        self._storage = storage
        self._anti_entropy = anti_entropy
        self._tasks = Tasks("missed writes", sleep)

    def start(self) -> None:
        """Make good what storage refused before this start, and from now on what it refuses; call inside
        the running event loop."""
        self._tasks.spawn(self._follow(), "follow")

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _follow(self) -> None:
        """Storage sets its ``refused`` event at each write it refuses: a repair each time it is marked."""
        storage = self._storage
        while True:
            if storage.missed:
                await self._make_good()
            await storage.refused.wait()
            storage.refused.clear()

    async def _make_good(self) -> None:
        storage, anti_entropy = self._storage, self._anti_entropy
        counted, done = storage.refusals, set[str]()  # the peers repaired with since that many refusals
        said: list[str] = []
        while storage.missed:
            if not storage.writable():
                await self._tasks.sleep(_RETRY_S)
                continue
            if storage.refusals != counted:  # refused again: every peer again
                counted, done = storage.refusals, set()
            for peer in anti_entropy.peers:  # each exchange begins after the refusals counted
                if peer.url not in done and (await anti_entropy.repair_with(peer)).completed:
                    done.add(peer.url)
            waiting = [peer.url for peer in anti_entropy.peers if peer.url not in done]
            if not waiting and storage.made_good(counted):
                return
            if waiting and waiting != said:
                log.warning("the writes this node refused wait for a repair with %s", ", ".join(waiting))
            said = waiting
            await self._tasks.sleep(_RETRY_S)
