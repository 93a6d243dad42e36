"""How every membership change is made (:func:`make_change`), and the changes a running member starts when
asked: a member leaving (:func:`start_leave`, ``admin leave``), a new replication factor
(:func:`start_resize`, ``admin replication-factor``) and a claimed join that never comes undone
(:func:`undo_join`, ``admin remove`` or the claimant's kvnode.cluster.join_watcher).

A change is the next membership version (kvnode.topology.membership), made in three steps, each recorded
before the next takes effect: offered to the claimant first (kvnode.topology.change_steps.offer_order). A
member takes a version only if it is newer than its own, so of two changes made at once the claimant
takes one and refuses the other (it orders changes, as Riak's claimant does); then stored by the node
making it; then offered to every other member (one that misses it learns it at its next handshake with a
member that has it). The member a leave or a new factor concerns walks it from there
(kvnode.cluster.own_part); an undo is over once made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from kvnode.cluster.crash_points import crash_point
from kvnode.cluster.members import Members
from kvnode.config import ReplicationFactor
from kvnode.replica.errors import ReplicaError
from kvnode.topology.change_steps import offer_order
from kvnode.topology.membership import ChangeRefused, Membership

__all__ = ["Offeree", "make_as_member", "make_change", "start_leave", "start_resize", "undo_join"]

log = logging.getLogger(__name__)


class Offeree(Protocol):
    """A member a change is offered to (kvnode.replica.peer.PeerReplica)."""

    async def offer_membership(self, encoded: bytes) -> None: ...


async def make_change(
    plan: Membership,
    maker: str,
    member: Callable[[str], Offeree],
    store: Callable[[], None],
    *,
    newcomer: bool = False,
    crash_at: str = "",
    step: str = "",
) -> None:
    """Make ``plan``, the next version, from node ``maker``: offered to the claimant (ChangeRefused if it
    does not take it), stored (``store``), then offered to the other members, each reached by
    ``member(url)``; when ``maker`` is the claimant it stores first. ``newcomer``: ``maker`` is not a
    member yet (its own join or replace). ``step`` names the crash points ``STEP:claimant-took`` and
    ``STEP:stored`` of ``crash_at`` (kvnode.cluster.crash_points; none without it)."""
    claimant, others = offer_order(plan, maker, newcomer)
    if claimant != maker:
        try:
            await member(claimant).offer_membership(plan.encode())
        except ReplicaError as refusal:
            raise ChangeRefused(f"the claimant {claimant} did not take the change: {refusal}") from None
        if step:
            crash_point(f"{step}:claimant-took", crash_at)
    store()
    if step:
        crash_point(f"{step}:stored", crash_at)
    offers = await asyncio.gather(
        *(member(url).offer_membership(plan.encode()) for url in others), return_exceptions=True
    )
    for url, outcome in zip(others, offers, strict=True):
        if isinstance(outcome, BaseException):
            log.warning("%s did not take membership version %d yet: %s", url, plan.version, outcome)


async def make_as_member(
    members: Members, plan: Membership, *, why: str = "", crash_at: str = "", step: str = ""
) -> None:
    """:func:`make_change` from this node, a member: its peers reached over their channels, ``plan`` stored
    and run with unless this node has it already (from the claimant, after a crash); ``why``: the reason a
    join it undoes was undone (kvnode.cluster.members.Members.adopt)."""

    def peer(url: str) -> Offeree:
        return members.epoch.peers[url]

    def store() -> None:
        if members.membership.version < plan.version:
            members.adopt(plan, why)

    await make_change(plan, members.own_url, peer, store, crash_at=crash_at, step=step)


async def start_leave(members: Members, member: str, timeout_s: float) -> Membership:
    """``admin leave``, on the node asked: make ``member`` leaving and return that version; the member
    streams its records and removes itself (kvnode.cluster.own_part). Raises ChangeRefused: another change
    under way, or a member unreachable (the one leaving included, since it streams)."""
    plan = members.membership.with_leaving(member)
    await _reach_all(members, "a leave", timeout_s)
    await make_as_member(members, plan)
    return plan


async def start_resize(
    members: Members, replication: ReplicationFactor | int, timeout_s: float
) -> Membership:
    """``admin replication-factor N`` (or ``DC:N,DC:N,...``), on the node asked: the version moving to
    ``replication`` owners a key in each datacenter, made and returned; the claimant streams the new
    copies, then makes the next version with the new factor (kvnode.cluster.own_part). Raises ValueError
    for a factor that does not fit the members (out of 1..members in a datacenter, one misnamed or left
    out), ChangeRefused: another change under way, or a member unreachable (every member's records
    stream)."""
    plan = members.membership.resized(replication)
    await _reach_all(members, "a new replication factor", timeout_s)
    await make_as_member(members, plan)
    return plan


async def undo_join(members: Members, member: str, why: str) -> Membership:
    """Make the version without ``member``, which joins and never came, and return it; ``why`` goes in the
    line that says so (the log's, and ``admin status``'s on this node). Raises ChangeRefused: not a member
    joining (one like the others leaves instead), or the claimant did not take it.

    Nothing acknowledged is lost: while a member joins, reads use the present owners only, and a write to
    a key it would own is acknowledged only once ``ack`` of the present owners took it besides it
    (kvnode.coordinator.coordinator's pending replicas). From the undo on, reads and writes go to them
    only, and the hints kept for the joiner are dropped with its channel (kvnode.cluster.members, which
    also tells a joiner that still answers, so it ends its part)."""
    plan = members.membership.undone(member)
    await make_as_member(members, plan, why=why)
    log.warning("%s", members.undone)
    return plan


async def _reach_all(members: Members, change: str, timeout_s: float) -> None:
    """Raises ChangeRefused naming the peers that do not answer within ``timeout_s``."""
    peers = members.peers
    reached = await asyncio.gather(*(peer.reach(timeout_s) for peer in peers))
    unreachable = [peer.url for peer, ok in zip(peers, reached, strict=True) if not ok]
    if unreachable:
        raise ChangeRefused(f"{change} needs every member; unreachable: {', '.join(unreachable)}")
