"""The other members as this node runs with them: the membership (kvnode.topology.membership), its placement,
and a replica channel to each peer (kvnode.replica.peer) with its hint delivery.

A node learns a newer membership from a peer (a handshake says each end's version; the older end fetches
the newer one), or makes one (kvnode.cluster.changes). :meth:`Members.adopt` does what
kvnode.topology.adoption says of it: it stores it, then moves to it in one place: a new epoch
(kvnode.topology.epoch: the membership, its placements, a channel to each peer) handed to every part that
depends on the membership through its ``use(epoch)`` (the parts given to :meth:`Members.start`, the
drivers included), before the next request is handled; peers no longer members are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from kvnode.cluster.crash_points import crash_point
from kvnode.figures import Figure, Figures, Kind
from kvnode.replica.errors import ReplicaError
from kvnode.replica.hints import HintStore
from kvnode.replica.peer import PeerReplica
from kvnode.scheduling import Tasks
from kvnode.storage.keyspace import StorageError
from kvnode.storage.system_db import StoredMembership
from kvnode.topology.adoption import NotAdopted, adoption
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership
from kvnode.topology.placement import Placement
from kvnode.topology.versions_heard import VersionsHeard

__all__ = ["MEMBERSHIP_FIGURES", "Members", "NotAdopted"]

# A Members' figures (kvnode.figures).
MEMBERSHIP_FIGURES = Figures("membership", (
    Figure("membership.version", Kind.GAUGE, "The version of the membership this node runs with "
           "(kvnode.topology.membership)", "kvnode_membership_version"),
    Figure("undone", Kind.TEXT, "the last join this node saw undone, and why (kvnode.cluster.join_watcher, "
           "kvnode.cluster.changes.undo_join)"),
))  # fmt: skip

log = logging.getLogger(__name__)


class UsesEpoch(Protocol):
    """A part that depends on the membership: told of each epoch the node runs with, the first included."""

    def use(self, epoch: Epoch[PeerReplica]) -> None: ...


class Members:
    """``make_peer(url)`` opens the replica channel to a peer (lazily: it connects on first use);
    ``follow(peer)`` starts what runs per peer (hint delivery) and returns how to stop it."""

    def __init__(
        self,
        own_url: str,
        membership: Membership,
        stored: StoredMembership,
        hints: HintStore,
        make_peer: Callable[[str], PeerReplica],
        now: Callable[[], int],
        crash_at: str = "",
        follow: Callable[[PeerReplica], Callable[[], Awaitable[None]]] | None = None,
    ) -> None:
        """``now``: the hybrid clock's time (when a membership took effect); ``crash_at``: the node's
        --crash-at (kvnode.cluster.crash_points)."""
        self.own_url = own_url
        self.crash_at = crash_at
        # The membership without this node, once it left or its join was undone: it takes no further part.
        self.without_this_node: Membership | None = None
        self.undone = ""  # the last join this node saw undone, and why
        self._follow_peer = follow
        self._users: tuple[UsesEpoch, ...] = ()
        self._stored = stored
        self._now = now
        # Since when this node runs with this membership (tombstone GC hands over what it no longer owns
        # a grace period after); a membership stored without its time counts from this start.
        since = stored.since()
        if not since:
            since = now()
            stored.save(membership, since)
        peers = {url: make_peer(url) for url in membership.urls if url != own_url}
        self.epoch: Epoch[PeerReplica] = Epoch(own_url, membership, peers, since)
        self._hints = hints
        self._make_peer = make_peer
        self._stops: dict[str, Callable[[], Awaitable[None]]] = {}
        self._tasks = Tasks("membership")  # closing peers no longer members, comparing memberships
        self._versions = VersionsHeard()
        self._versions_heard = asyncio.Event()  # set at each version heard: the barrier looks again

    @property
    def membership(self) -> Membership:
        return self.epoch.membership

    @property
    def placement(self) -> Placement:
        return self.epoch.placement

    @property
    def peers(self) -> list[PeerReplica]:
        """Every other member's channel, in the membership's order."""
        return list(self.epoch.peers.values())

    @property
    def since(self) -> int:
        return self.epoch.since

    def start(self, users: Sequence[UsesEpoch]) -> None:
        """Hand the epoch to ``users``, every part that depends on the membership, now and at each change
        (the one place a change takes effect); start what runs per peer. Call inside the running loop."""
        self._users = tuple(users)
        for user in self._users:
            user.use(self.epoch)
        for peer in self.peers:
            self._follow(peer)

    def _follow(self, peer: PeerReplica) -> None:
        if self._follow_peer is not None:
            self._stops[peer.url] = self._follow_peer(peer)

    async def close(self) -> None:
        for stop in self._stops.values():
            await stop()
        self._stops.clear()
        for peer in self.peers:
            await peer.close()
        await self._tasks.finish()

    def adopt(self, offered: Membership, why: str = "") -> None:
        """Store ``offered`` and run with it from now on (kvnode.topology.adoption says what that takes);
        ``why``: the reason a join it undoes was undone, when this node made the undo. Raises NotAdopted
        when it is of another cluster, not newer than the one this node runs with, or leaves this node
        out."""
        taken = adoption(self.membership, offered, self.own_url, why)
        if not taken.member:
            self._no_longer_member(offered)
            return
        since = self._now()
        self._stored.save(offered, since)  # before it takes effect: a node that crashes now restarts with it
        crash_point("adopt:stored", self.crash_at)
        old = self.epoch.peers
        others = [url for url in offered.urls if url != self.own_url]
        peers = {url: old[url] if url in old else self._make_peer(url) for url in others}
        self.epoch = Epoch(self.own_url, offered, peers, since)
        for user in self._users:
            user.use(self.epoch)
        for url in taken.opened:
            self._follow(peers[url])
        for peer in self.peers:
            if self._versions.behind([peer.url], offered.version):
                self._compare_with(peer.url)  # it may not have this version yet: pass it on
        if taken.undone:
            self.undone = taken.undone
        for url in taken.closed:
            self._tasks.spawn(self._let_go(url, old[url], offered if url in taken.told else None))
        log.info("runs with membership version %d from now on: %s", offered.version, ",".join(offered.urls))

    def _no_longer_member(self, without: Membership) -> None:
        """This node left, or its join was undone: the others run with ``without``. Stored (a restart is
        refused: it is no longer a member); it goes on answering its peers as it did until it is
        stopped."""
        if self.without_this_node is None:
            self._stored.save(without, self._now(), left=self.own_url)
            self.without_this_node = without
            if self.own_url in self.membership.joining:
                log.warning(
                    "this node's join was undone (membership version %d): stop it, and wipe its data dir "
                    "before it joins again", without.version,
                )  # fmt: skip
            else:
                log.warning(
                    "left the cluster (membership version %d): this node can be stopped", without.version
                )

    async def _let_go(self, url: str, peer: PeerReplica, told: Membership | None) -> None:
        """Stop using a peer no longer a member; one whose join was undone is ``told`` so first (it
        ends its part in the change; one that is gone does not answer)."""
        if told is not None:
            with contextlib.suppress(ReplicaError):
                await peer.offer_membership(told.encode())
        stop = self._stops.pop(url, None)
        if stop is not None:
            await stop()
        await peer.close()
        dropped = self._hints.forget(url)
        if dropped:
            log.info("dropped %d hints for %s, no longer a member", dropped, url)

    async def peers_at(self, version: int) -> None:
        """Return once every peer runs with ``version`` or a newer one, as far as this node heard (a
        handshake, or an offer it took): the progress barrier of a join."""
        while self._versions.behind([peer.url for peer in self.peers], version):
            for peer in self.peers:
                peer.probe()  # a peer not connected says its version when it is
            self._versions_heard.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._versions_heard.wait(), 1.0)

    def _heard(self, peer_url: str, version: int) -> None:
        self._versions.heard(peer_url, version)
        self._versions_heard.set()

    def heard_version(self, peer_url: str, version: int) -> None:
        """A handshake with ``peer_url`` said its membership version: if it differs from this node's,
        compare the two (a member that missed a change learns it either way)."""
        self._heard(peer_url, version)
        if version != self.membership.version:
            self._compare_with(peer_url)

    def _compare_with(self, peer_url: str) -> None:
        peer = next((peer for peer in self.peers if peer.url == peer_url), None)
        if peer is None or not self._versions.begin(peer_url):
            return  # not a member in this node's view (it cannot be asked yet), or under way
        self._tasks.spawn(self._compare(peer))

    async def _compare(self, peer: PeerReplica) -> None:
        """Fetch the peer's membership: adopt it if it is newer, offer this node's if it is older."""
        try:
            theirs = Membership.decode(await peer.fetch_membership())
            self._heard(peer.url, theirs.version)
            comparison = self._versions.compare(mine=self.membership.version, theirs=theirs.version)
            if comparison == "fetch":
                self.adopt(theirs)
            elif comparison == "offer":
                ours = self.membership
                await peer.offer_membership(ours.encode())
                self._heard(peer.url, ours.version)
        except NotAdopted as refusal:
            log.warning("did not adopt the membership %s runs with: %s", peer.url, refusal)
        except (ReplicaError, ValueError, StorageError) as error:  # tried again at the next handshake
            log.warning("could not compare memberships with %s: %s", peer.url, error)
        finally:
            self._versions.ended(peer.url)
