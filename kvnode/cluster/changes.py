"""A node becoming a member: ``node --join SEED_URL`` (a member more) or ``node --join SEED_URL
--replace MEMBER_URL`` (in the place of a member that is down for good).

The node is not a member yet. It learns the cluster's identity from the seed's ``/v0/status`` and the
membership over a replica channel (which proves the cluster secret), then makes the change itself, each
step recorded before the next takes effect (:func:`take_place`):

1. check: no other change is under way; for a replace, MEMBER is a member and does not answer (a member
   that is up is not replaced: stop it first); every other member is reachable (refused otherwise,
   naming those that are not);
2. offer the next version (kvnode.topology.membership: this node joining, or in MEMBER's place) to the
   claimant,
   the first other member in the cluster's order. A member takes a version only if it is newer than its
   own, so of two changes made at once the claimant takes one and refuses the other (it orders changes,
   as Riak's claimant does);
3. store that version here (for a replace, this node's data "rebuilding" first), then offer it to every
   other member (one that misses it learns it at its next handshake with a member that has it);
4. start as a member. A replacement rebuilds from the other replicas (kvnode.healing.rebuild): it takes
   writes at once, and its reads answer "not ready" until it holds every record it owns. A node joining
   takes writes for the keys it will own while reads stay on their owners (kvnode.coordinator.coordinator's
   pending replicas); once every member runs with the version that has it joining (so every write reaches it),
   it gets what it owns by a full anti-entropy repair with every member, then makes itself a member like the
   others: the next version, offered to the claimant, stored, offered to the rest (:func:`settle`).

A crash anywhere is resumed by starting the node again with the same flags: before step 3 the change is
checked and offered again (a claimant that took it takes the same version again); after it, the node is a
member (joining, or rebuilding), its data dir says so, the flags are ignored, and it goes on from there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable, Sequence
from functools import partial

import aiohttp

from kvnode.cluster.crash_points import crash_point
from kvnode.cluster.members import Members
from kvnode.cluster.streams import stream_leaving, stream_new_copies
from kvnode.config import NodeConfig
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.replica import Replica
from kvnode.replica.channel.handshake import ClusterAuth
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.replica.readiness import NodeState
from kvnode.scheduling import Sleep, Tasks
from kvnode.storage.keyspace import Storage, StorageError
from kvnode.storage.system_db import SystemDb
from kvnode.topology.change_steps import Progress, Start, Step, next_step, start_from
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import ChangeRefused, Membership

__all__ = ["OwnPart", "offer_change", "start_leave", "start_resize", "take_place"]

log = logging.getLogger(__name__)

_REACH_S = 3.0  # how long a member may take to open a channel before it counts as unreachable
_RETRY_S = 1.0  # between two attempts of a join's or a leave's last steps


OpenPeer = Callable[[str, ClusterAuth | None], PeerReplica]


async def take_place(
    config: NodeConfig, system: SystemDb, ssl_context: ssl.SSLContext | None, open_peer: OpenPeer
) -> Membership:
    """Make the change and return the membership this node is a member of; raises ChangeRefused.
    ``open_peer(url, auth)``: a channel to a member, for the change only (closed when it is made)."""
    kind = "replace" if config.replace else "join"
    cluster = await _cluster_identity(config.join, ssl_context)
    auth = ClusterAuth(config.cluster_secret, cluster, config.url) if config.cluster_secret else None
    opened: dict[str, PeerReplica] = {}

    def peer(url: str) -> PeerReplica:
        if url not in opened:
            opened[url] = open_peer(url, auth)
        return opened[url]

    # These channels are the change's, not the node's: their comings and goings are not logged (a
    # failure is the change's to say), so a refused change ends with its one line.
    quiet = logging.getLogger("kvnode.replica.peer")
    quiet.addFilter(_nothing)
    try:
        if not await peer(config.join).reach(_REACH_S):
            raise ChangeRefused(f"the seed {config.join} is unreachable: {peer(config.join).refusal}")
        current = Membership.decode(await peer(config.join).fetch_membership())
        if start_from(current, config.url) is Start.STORE:
            plan = current  # the claimant took this node's change before it crashed
        elif config.replace:
            plan = current.replaced(config.replace, config.url)
            if await peer(config.replace).reach(_REACH_S):
                raise ChangeRefused(
                    f"{config.replace} answers: a member that is up is not replaced; stop it first"
                )
        else:
            plan = current.joined(config.url)
        others = [url for url in plan.urls if url != config.url]
        reached = await asyncio.gather(*(peer(url).reach(_REACH_S) for url in others))
        unreachable = [url for url, ok in zip(others, reached, strict=True) if not ok]
        if unreachable:
            raise ChangeRefused(f"a {kind} needs every other member; unreachable: {', '.join(unreachable)}")
        await _offer_all("change", peer, plan, others, config.crash_at, lambda: _store(system, plan, config))
        return plan
    except (ReplicaError, ValueError) as error:
        raise ChangeRefused(f"cannot {kind}: {error}") from None
    finally:
        for opened_peer in opened.values():
            await opened_peer.close()
        quiet.removeFilter(_nothing)


def _store(system: SystemDb, plan: Membership, config: NodeConfig) -> None:
    if config.replace:
        system.identity.save_state(NodeState.REBUILDING.value)  # before the membership: see step 3
        log.warning(
            "took the place of %s (membership version %d); rebuilding its data from the other replicas",
            config.replace, plan.version,
        )  # fmt: skip
    else:
        log.warning(
            "joining (membership version %d): taking writes, streaming what it will own", plan.version
        )
    system.membership.save(plan)


async def _offer_all(
    step: str,
    peer: Callable[[str], PeerReplica],
    plan: Membership,
    others: Sequence[str],
    crash_at: str,
    store: Callable[[], None],
) -> None:
    """Steps 2 and 3 of a ``step`` (change, settle): the claimant first (ChangeRefused if it does not take
    it), ``store``, the rest."""
    claimant, *rest = others
    try:
        await peer(claimant).offer_membership(plan.encode())
    except ReplicaError as refusal:
        raise ChangeRefused(f"the claimant {claimant} did not take the change: {refusal}") from None
    crash_point(f"{step}:claimant-took", crash_at)
    store()
    crash_point(f"{step}:stored", crash_at)
    offers = await asyncio.gather(
        *(peer(url).offer_membership(plan.encode()) for url in rest), return_exceptions=True
    )
    for url, outcome in zip(rest, offers, strict=True):
        if isinstance(outcome, BaseException):
            log.warning("%s did not take membership version %d yet: %s", url, plan.version, outcome)


class OwnPart:
    """This node's part in a change that concerns it, step by step (kvnode.topology.change_steps): once every
    peer runs with the version that has it joining or leaving (or, the claimant, a new replication
    factor), and the writes they started before are over (``drain_s``: their replica timeout, twice for
    the one rewrite), it streams (joining: a repair with every peer; leaving: each key it owns to its next
    owner; a new factor: every member's to the owners the keys gain), then offers the next version
    (settled, without it, or with the new factor), the claimant first. A step that fails is tried again;
    told by kvnode.cluster.members of every membership the node runs with. ``local``: this node as a
    replica."""

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

    def use(self, epoch: Epoch[PeerReplica]) -> None:
        """Start this node's part if the epoch has it joining or leaving and it is not running."""
        if self._tasks.running("walk"):
            return
        if next_step(epoch.membership, epoch.own_url, Progress(0)) is not Step.NONE:
            self._tasks.spawn(self._walk(), "walk")

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _walk(self) -> None:
        members = self._members
        progress = Progress(members.membership.version)
        while members.left is None:
            membership = members.membership
            if progress.version != membership.version:
                progress = Progress(membership.version)  # moved on: start over
            step = next_step(membership, members.own_url, progress)
            if step is Step.NONE:
                return
            try:
                await self._take(step, membership)
            except (ChangeRefused, ReplicaError, StorageError) as failure:
                log.warning("membership change, step %s: %s; trying again", step.value, failure)
                await self._tasks.sleep(_RETRY_S)
                continue
            progress = progress.after(step)

    async def _take(self, step: Step, membership: Membership) -> None:
        members, own = self._members, self._members.own_url
        if step is Step.BARRIER:
            await members.peers_at(membership.version)
        elif step is Step.DRAIN:
            await self._tasks.sleep(self._drain_s)  # a write started before is on its ack replicas, or failed
        elif membership.next_replication:
            await self._resize(step, membership)
        elif step is Step.STREAM and own in membership.joining:
            run = await self._anti_entropy.repair_all()
            # Counted whether or not every peer completed: a run again does not receive them twice.
            members.streamed += sum(outcome.received for outcome in run.outcomes.values())
            if run.unreached:
                raise ChangeRefused(f"streaming did not complete with {', '.join(run.unreached)}")
        elif step is Step.STREAM:
            peers = {peer.url: peer for peer in members.peers}
            owning = membership.read_placement() or membership.placement()  # this node an owner still
            members.streamed += await stream_leaving(
                self._storage, owning, membership.removed(own).placement(), peers
            )
            crash_point("leave:streamed", self._crash_at)
        else:
            joining = own in membership.joining
            after = membership.settled(own) if joining else membership.removed(own)
            by_url = {peer.url: peer for peer in members.peers}
            others = [url for url in after.urls if url != own]
            store = partial(_adopt_newer, members, after)
            await _offer_all(
                "settle" if joining else "depart", by_url.__getitem__, after, others, self._crash_at, store
            )
            log.info(
                "%s (membership version %d), %d records streamed",
                "joined: a member like the others" if joining else "left", after.version, members.streamed,
            )  # fmt: skip

    async def _resize(self, step: Step, membership: Membership) -> None:
        """The claimant's STREAM and FINISH steps of a new replication factor."""
        members, after = self._members, membership.resettled()
        if step is Step.FINISH:
            await offer_change(members, after, "resize")
            log.info(
                "replication factor %d (membership version %d), %d records streamed",
                after.replication, after.version, members.streamed,
            )  # fmt: skip
            return
        before = membership.read_placement() or membership.placement()
        await stream_new_copies(members, self._storage, self._local, before, after.placement())
        crash_point("resize:streamed", self._crash_at)


async def start_resize(members: Members, replication: int, timeout_s: float) -> Membership:
    """``admin replication-factor N``, on the node asked: the version moving to ``replication`` owners a
    key, made (the claimant first) and returned; the claimant streams the new copies, then makes the next
    version with the new factor (:class:`OwnPart`). Raises ValueError for a factor out of 1..members,
    ChangeRefused: another change under way, or a member unreachable (every member's records stream)."""
    plan = members.membership.resized(replication)
    await _reach_all(members, "a new replication factor", timeout_s)
    await offer_change(members, plan, "resize")
    return plan


async def _reach_all(members: Members, change: str, timeout_s: float) -> None:
    """Raises ChangeRefused naming the peers that do not answer within ``timeout_s``."""
    peers = members.peers
    reached = await asyncio.gather(*(peer.reach(timeout_s) for peer in peers))
    unreachable = [peer.url for peer, ok in zip(peers, reached, strict=True) if not ok]
    if unreachable:
        raise ChangeRefused(f"{change} needs every member; unreachable: {', '.join(unreachable)}")


async def offer_change(members: Members, plan: Membership, step: str = "change") -> None:
    """Make ``plan``, the next version, from this node as every change is made: the claimant first
    (ChangeRefused if it does not take it; this node stores it first when it is the claimant), then this
    node, then the other members of ``plan``."""
    own, peers = members.own_url, {peer.url: peer for peer in members.peers if peer.url in plan.urls}
    store = partial(_adopt_newer, members, plan)
    if plan.claimant == own:
        store()
        await asyncio.gather(
            *(peer.offer_membership(plan.encode()) for peer in peers.values()), return_exceptions=True
        )
        return
    others = [plan.claimant, *(url for url in plan.urls if url not in (own, plan.claimant))]
    await _offer_all(step, peers.__getitem__, plan, others, "", store)


async def start_leave(members: Members, member: str, timeout_s: float) -> Membership:
    """``admin leave``, on the node asked: make ``member`` leaving (the claimant first, then this node, then
    the rest) and return that version; the member streams its records and removes itself (:class:`OwnPart`).
    Raises ChangeRefused: another change under way, or a member unreachable (the one leaving included,
    since it streams)."""
    plan = members.membership.left(member)
    await _reach_all(members, "a leave", timeout_s)
    await offer_change(members, plan, "leave")
    return plan


def _adopt_newer(members: Members, settled: Membership) -> None:
    """Run with ``settled`` unless this node has it already (from the claimant, after a crash)."""
    if members.membership.version < settled.version:
        members.adopt(settled)


def _nothing(record: logging.LogRecord) -> bool:
    return False


async def _cluster_identity(seed: str, ssl_context: ssl.SSLContext | None) -> str:
    """The identity of the cluster ``seed`` is a member of, from its /v0/status."""
    try:
        timeout = aiohttp.ClientTimeout(total=_REACH_S)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{seed}/v0/status", ssl=ssl_context if ssl_context is not None else True) as answer,
        ):
            status = json.loads(await answer.read())
            cluster = status["cluster_id"]
    except (aiohttp.ClientSSLError, aiohttp.ClientConnectorCertificateError) as error:
        raise ChangeRefused(f"the seed {seed} did not say its cluster: {error}") from None
    except aiohttp.ClientConnectorError as error:
        cause = error.os_error  # asyncio words a refused connection "Connect call failed (...)"
        why = "connection refused" if isinstance(cause, ConnectionRefusedError) else cause.strerror or cause
        raise ChangeRefused(
            f"the seed {seed} is unreachable ({why}): check the --join URL, and that a node of the cluster "
            "runs there"
        ) from None
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as error:
        raise ChangeRefused(f"the seed {seed} did not say its cluster: {error!r}") from None
    if not isinstance(cluster, str):
        raise ChangeRefused(f"the seed {seed} did not say its cluster")
    return cluster
