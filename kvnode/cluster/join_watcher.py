"""The claimant's watcher of a member joining: it undoes a claimed join that never comes once the member
has been silent for ``--join-timeout-s`` (:class:`JoinWatcher`; the pure kvnode.topology.join_watch says
when). The undo is the next membership version without the member joining
(kvnode.cluster.changes.undo_join, which ``admin remove MEMBER`` makes at once too), so every member adopts
it, and a later change may start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kvnode.cluster.changes import undo_join
from kvnode.cluster.members import Members
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.scheduling import Sleep, Tasks
from kvnode.storage.keyspace import StorageError
from kvnode.topology.adoption import NotAdopted
from kvnode.topology.epoch import Epoch
from kvnode.topology.join_watch import Verdict, Watch, verdict, watch_for
from kvnode.topology.membership import ChangeRefused

__all__ = ["JoinWatcher"]

log = logging.getLogger(__name__)

_LOOK_S = 1.0  # between two looks at the member joining, and the longest one look waits for it
_MAX_GAP_S = 5 * _LOOK_S  # looks further apart than this: this node was not looking, the silence starts over


class JoinWatcher:
    """On the claimant, while a member joins: a look at it every second (is its replica channel open, or
    does it open within the look?), and its join undone once it has been silent for ``timeout_s`` by
    ``monotonic``. Told by kvnode.cluster.members of every membership the node runs with."""

    def __init__(
        self,
        members: Members,
        timeout_s: float,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._members = members
        self._timeout_s = timeout_s
        self._monotonic = monotonic
        self._tasks = Tasks("join watch", sleep)

    def use(self, epoch: Epoch[PeerReplica]) -> None:
        """Start watching if a member joins, this node is the claimant, and it is not watching already."""
        if not self._tasks.running("watch") and watch_for(epoch.membership, epoch.own_url, None) is not None:
            self._tasks.spawn(self._watch(), "watch")

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _watch(self) -> None:
        members = self._members
        watch: Watch | None = None
        while (watch := watch_for(members.membership, members.own_url, watch)) is not None:
            heard = await members.epoch.peers[watch.member].reach(_LOOK_S)
            if members.membership.version != watch.version:
                continue  # it came, or was undone, during the look: look at the version there is now
            watch = watch.looked(heard, self._monotonic(), _MAX_GAP_S)
            if verdict(watch, self._timeout_s) is Verdict.UNDO:
                why = f"no progress for {watch.silent_for:.0f} s"
                try:
                    await undo_join(members, watch.member, why)
                except (ChangeRefused, NotAdopted, ReplicaError, StorageError) as failure:
                    log.warning(
                        "could not undo the join of %s (%s): %s; trying again", watch.member, why, failure
                    )
            await self._tasks.sleep(_LOOK_S)
