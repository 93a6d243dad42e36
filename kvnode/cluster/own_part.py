"""This node's part in a membership change it walks (the member joining or leaving; for a new replication
factor, the claimant): kvnode.topology.change_steps says the next action, :class:`OwnPart` carries it out
and keeps the progress, which it reports (``/v0/cluster``'s ``own_part``, and the records it streamed in
``/metrics``).

Once every peer runs with the version that has the change (the barrier), and the writes they started
before are over (the drain: the replica timeout, twice for the one rewrite), it streams (joining: a repair
with every peer; leaving: each key it owns to its next owner; a new factor: every member's versions to the
owners the keys gain), then makes the next version (settled, without it, or with the new factor), the
claimant first (kvnode.cluster.changes.make_change). A step that fails is tried again.
"""

from __future__ import annotations

import asyncio
import logging

from kvnode.cluster.changes import make_as_member
from kvnode.cluster.crash_points import crash_point
from kvnode.cluster.members import Members
from kvnode.cluster.streams import stream_leaving, stream_new_copies
from kvnode.figures import Figure, Figures, Kind
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.replica import Replica
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.scheduling import Sleep, Tasks
from kvnode.storage.keyspace import Storage, StorageError
from kvnode.topology import change_steps as steps
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import ChangeRefused, Membership

__all__ = ["CHANGE_FIGURES", "OwnPart"]

# An OwnPart's figures (kvnode.figures), shown with the membership's.
CHANGE_FIGURES = Figures("change", (
    Figure("streamed", Kind.COUNTER, "Records this node got by joining, sent to their next owners by "
           "leaving, or wrote as the claimant of a new replication factor",
           "kvnode_membership_streamed_records"),
), section="membership")  # fmt: skip

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # between two attempts of a step
# The points of a change's last step where --crash-at may end this node (kvnode.cluster.crash_points).
_FINISH_CRASH_POINTS = {steps.Kind.JOIN: "settle", steps.Kind.LEAVE: "depart"}
_FINISHED = {steps.Kind.JOIN: "joined: a member like the others", steps.Kind.LEAVE: "left"}


class OwnPart:
    """Told by kvnode.cluster.members of every membership the node runs with; walks the change under way
    when it is this node's. ``local``: this node as a replica; ``drain_s``: how long the drain waits."""

    def __init__(
        self,
        members: Members,
        anti_entropy: AntiEntropy,
        storage: Storage,
        local: Replica,
        drain_s: float,
        crash_at: str,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._members = members
        self._anti_entropy = anti_entropy
        self._storage = storage
        self._local = local
        self._drain_s = drain_s
        self._crash_at = crash_at
        self._tasks = Tasks("membership change", sleep)
        self.streamed = 0  # records streamed in every change since start
        self.progress = steps.Progress(0)  # in the change it walks, or walked last (version 0: none yet)

    def use(self, epoch: Epoch[PeerReplica]) -> None:
        """Start walking if the epoch's change is this node's to walk and it is not walking already."""
        if self._tasks.running("walk"):
            return
        if steps.next_action(epoch.membership, epoch.own_url, steps.Progress(0)) is not None:
            self._tasks.spawn(self._walk(), "walk")

    async def stop(self) -> None:
        await self._tasks.stop()

    def _sent(self, records: int) -> None:
        self.streamed += records
        self.progress = self.progress.sent(records)

    async def _walk(self) -> None:
        members = self._members
        while members.without_this_node is None:
            membership = members.membership
            action = steps.next_action(membership, members.own_url, self.progress)
            if action is None:
                return
            if self.progress.version != membership.version:
                self.progress = steps.Progress(membership.version)  # another change, or this one moved on
            try:
                await self._carry_out(action, membership)
            except (ChangeRefused, ReplicaError, StorageError) as failure:
                log.warning("membership change, step %s: %s; trying again", action.step.value, failure)
                await self._tasks.sleep(_RETRY_S)
                continue
            self.progress = self.progress.after(action)

    async def _carry_out(self, action: steps.Action, membership: Membership) -> None:
        members = self._members
        match action:
            case steps.AwaitPeers(version):
                await members.peers_at(version)
            case steps.Drain():
                await self._tasks.sleep(self._drain_s)
            case steps.RepairWithPeers():
                run = await self._anti_entropy.repair_all()
                # Counted whether or not every peer completed: a run again does not receive them twice.
                self._sent(sum(outcome.received for outcome in run.outcomes.values()))
                if run.unreached:
                    raise ChangeRefused(f"streaming did not complete with {', '.join(run.unreached)}")
            case steps.StreamLeaving(before, after):
                await stream_leaving(self._storage, before, after, members.epoch.peers, self._sent)
                crash_point("leave:streamed", self._crash_at)
            case steps.StreamNewCopies(before, after):
                own, peers = members.own_url, members.peers
                await stream_new_copies(own, self._storage, self._local, peers, before, after, self._sent)
                crash_point("resize:streamed", self._crash_at)
            case steps.OfferNext(kind, plan):
                step = _FINISH_CRASH_POINTS.get(kind, "")
                await make_as_member(members, plan, crash_at=self._crash_at, step=step)
                done = _FINISHED.get(kind) or f"replication factor {plan.replication}"
                streamed = self.progress.streamed
                log.info("%s (membership version %d), %d records streamed", done, plan.version, streamed)
