"""A claimed join that never comes, undone: by the claimant once the member joining has been silent for
``--join-timeout-s`` (:class:`JoinWatch`; kvnode.topology.join_watch says when), or at once by ``admin
remove MEMBER`` on any member (:func:`undo_join`, through kvnode.node.operator_api).

The undo is the next membership version without the member joining (Membership.undone: the members of
before its claim), made as every change is (kvnode.cluster.changes.offer_change: the claimant first), so
every member adopts it, and a later change may start. Nothing acknowledged is lost: while a member joins,
reads use the present owners only, and a write to a key it would own is acknowledged only once ``ack`` of
the present owners took it besides it (kvnode.coordinator.coordinator's pending replicas). The present
owners hold everything, so dropping the joiner loses nothing; from the undo on, reads and writes go to them
only, and the hints kept for the joiner are dropped with its channel (kvnode.cluster.members, which also
tells a joiner that still answers, so it ends its part).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kvnode.cluster.changes import offer_change
from kvnode.cluster.members import Members, NotAdopted
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.scheduling import Sleep, Tasks
from kvnode.storage.keyspace import StorageError
from kvnode.topology.epoch import Epoch
from kvnode.topology.join_watch import Verdict, Watch, verdict, watch_for
from kvnode.topology.membership import ChangeRefused, Membership

__all__ = ["JoinWatch", "undo_join"]

log = logging.getLogger(__name__)

_LOOK_S = 1.0  # between two looks at the member joining, and the longest one look waits for it
_MAX_GAP_S = 5 * _LOOK_S  # looks further apart than this: this node was not looking, the silence starts over


async def undo_join(members: Members, member: str, why: str) -> Membership:
    """Make the version without ``member``, which joins and never came, and return it; ``why`` goes in the
    line that says so (the log's, and ``admin status``'s on this node). Raises ChangeRefused: not a member
    joining (one like the others leaves instead), or the claimant did not take it."""
    plan = members.membership.undone(member)
    await offer_change(members, plan)
    members.undone = f"join of {member} undone: {why} (membership version {plan.version})"
    log.warning("%s", members.undone)
    return plan


class JoinWatch:
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
