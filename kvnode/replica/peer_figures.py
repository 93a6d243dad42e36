"""A peer's figures (kvnode.figures), read from kvnode.replica.peer.PeerReplica's properties for operators:
``/metrics`` labels each peer's with its URL, ``/v0/cluster`` shows them in its members (apart from peer.py,
which composes the peer's parts and is long enough). Who the peer is, is
kvnode.replica.channel.identities's."""

from __future__ import annotations

from kvnode.figures import Figure, Figures, Kind
from kvnode.replica.peer_state import PeerState

__all__ = ["PEER_FIGURES"]

PEER_FIGURES = Figures("peer", (
    Figure("state", Kind.GAUGE, "1 for the state each peer's replica channel is in", "kvnode_peer_state",
           states=tuple(state.value for state in PeerState)),
    Figure("down_for", Kind.GAUGE, "Seconds since a peer last failed with no answer since (0: it answers)",
           "kvnode_peer_down_seconds", key="down_for_s"),
    Figure("phi", Kind.GAUGE, "While connected, how unlikely a peer's silence is for a live peer: -log10 of "
           "its probability (1: asked last by speculative reads; --phi-threshold: taken for dead)",
           "kvnode_peer_phi"),
    Figure("distance", Kind.GAUGE, "A peer's distance: the shortest of its recent round trips, measured by "
           "its clock pings (0 before one); the failure detector allows a far peer a longer pause",
           "kvnode_peer_distance_seconds", key="distance_s"),
    Figure("protocol", Kind.GAUGE, "The replica protocol version each peer's channel speaks (0: no channel "
           "open)", "kvnode_peer_protocol_version"),
    Figure("frames_sent", Kind.COUNTER, "Frames of replica calls this node sent to each peer (each a write "
           "to the peer's socket; calls per frame: kvnode_peer_calls_sent_total over this)",
           "kvnode_peer_frames_sent"),
    Figure("calls_sent", Kind.COUNTER, "Replica calls this node sent to each peer, in those frames",
           "kvnode_peer_calls_sent"),
    Figure("refusal", Kind.TEXT, "while refused: what the handshake was refused for"),
    Figure("node_state", Kind.TEXT, "the state of its data as it last said (kvnode.healing.rebuild_state)"),
))  # fmt: skip
