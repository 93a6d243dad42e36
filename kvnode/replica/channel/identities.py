"""Who this node and its peers are, as replica handshakes tell it: what this node says of itself to a peer
(kvnode.replica.channel.handshake.Introduction: the protocol versions it speaks among it), and what it does
once a handshake with a peer completed, as client or as server: remember the peer's identity (one line in the
log when a member came back as another node: its disk was lost), and pass on the peer's introduction, which
says what it remembered of this node (kvnode.healing.rebuild).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kvnode.figures import Figure, Figures, Kind
from kvnode.replica.channel.handshake import Introduction
from kvnode.replica.channel.protocol import Versions, spoken
from kvnode.storage.system_db import NodeIdentity, PeerIdentities
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership

__all__ = ["IDENTITY_FIGURES", "Identities"]

# An Identities' figures (kvnode.figures); /v0/cluster shows each in its member.
IDENTITY_FIGURES = Figures("identities", (
    Figure("peers", Kind.TEXT, "each peer's identity, as this node last met it"),
))  # fmt: skip

log = logging.getLogger(__name__)


class Identities:
    """``peer_met(peer_url, introduction)`` hears of every completed handshake."""

    def __init__(
        self,
        own_url: str,
        membership: Membership,
        own: NodeIdentity,
        peers: PeerIdentities,
        peer_met: Callable[[str, Introduction], None],
        protocols: Versions | None = None,  # the protocol versions this node speaks (None: all it can)
    ) -> None:
        self.own_url = own_url
        self.protocols = protocols or spoken()
        self._membership = membership
        self._others = frozenset(membership.urls) - {own_url}
        self._own = own
        self._peers = peers
        self._peer_met = peer_met

    def use(self, epoch: Epoch[object]) -> None:
        """Introduce this node with another membership's version, and remember its members, from now on."""
        membership = self._membership = epoch.membership
        self._others = frozenset(membership.urls) - {self.own_url}

    def introduce(self, peer_url: str) -> Introduction:
        """What this node says of itself in a handshake with ``peer_url``."""
        return Introduction(
            self._own.value, *self._peers.get(peer_url), self._membership.version, self.protocols
        )

    @property
    def peers(self) -> dict[str, str]:
        """Each other member's identity, as this node last met it ("" before), in the cluster's order."""
        return {url: self._peers.get(url)[0] for url in self._membership.urls if url != self.own_url}

    def met(self, peer_url: str, theirs: Introduction) -> None:
        """A handshake with ``peer_url`` completed, and the peer introduced itself as ``theirs``. Anyone
        but another member (possible without a secret) is not remembered."""
        if peer_url not in self._others:
            return
        known, _ = self._peers.get(peer_url)
        if theirs.identity and theirs.identity != known:
            if known:
                log.warning(
                    "member %s came back as another node (identity %s, was %s): its data was lost, it "
                    "rebuilds from its peers",
                    peer_url, theirs.identity, known,
                )  # fmt: skip
            self._peers.remember(peer_url, theirs.identity)
        self._peer_met(peer_url, theirs)
