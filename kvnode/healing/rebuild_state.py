"""Whether this node's data is whole: the state machine that recognises a node whose disk was lost, and
follows its rebuild. Pure: the node feeds it what its peers say and what the rebuild did, saves the state it
returns (kvnode.storage.system_db.NodeIdentity), and acts on it (kvnode.healing.rebuild).

    unknown     the system database was new at this start: a new cluster's first start, or a member whose
                disk was lost; the first peer to complete a handshake tells which
    rebuilding  a peer knew this node's URL as another node: the node was a member and lost its data; it
                gets its records back from every peer
    serving     the data is whole

While not serving, the node takes writes as usual, but its reads answer "not ready" (a failed replica).

>>> machine = RebuildState.at_start(saved="unknown", members=3)
>>> machine.peer_met(remembered="", replaced="", own="a1").value    # a new cluster: nobody knew it
'serving'
>>> machine = RebuildState.at_start(saved="unknown", members=3)
>>> machine.peer_met(remembered="0f", replaced="", own="a1").value  # the URL was another node
'rebuilding'
>>> machine.peer_met(remembered="", replaced="", own="a1") is None  # decided: nothing changes it
True
>>> machine.rebuilt().value
'serving'
"""

from __future__ import annotations

from kvnode.replica.readiness import NodeState

__all__ = ["RebuildState"]


class RebuildState:
    """One node's state; each event returns the new state when it changed (to save before acting on it),
    None when it did not."""

    def __init__(self, state: NodeState) -> None:
        self.state = state
        self.known_as = ""  # once a peer said this node lost its data: what the peer knew its URL as

    @classmethod
    def at_start(cls, saved: str, members: int) -> RebuildState:
        """The state at start, from the one saved ("" when the data is whole). A cluster of one has no
        peer to ask or rebuild from: it serves."""
        if members == 1 or not saved:
            return cls(NodeState.SERVING)
        return cls(NodeState(saved))

    @property
    def serving(self) -> bool:
        return self.state is NodeState.SERVING

    def peer_met(self, remembered: str, replaced: str, own: str) -> NodeState | None:
        """A peer completed a handshake, saying which identity it remembered for this node's URL
        (``remembered``, "" if none) and which one that replaced; ``own`` is this node's identity.

        A peer that already remembers ``own`` met this node since its start (a handshake in the other
        direction that completed first, or one whose answer this node lost in a crash): what the URL was
        before is then the identity that ``own`` replaced."""
        if self.state is not NodeState.UNKNOWN:
            return None
        self.known_as = replaced if remembered == own else remembered
        return self._to(NodeState.REBUILDING if self.known_as else NodeState.SERVING)

    def rebuilt(self) -> NodeState | None:
        """A full repair with every peer completed."""
        if self.state is not NodeState.REBUILDING:
            return None
        return self._to(NodeState.SERVING)

    def _to(self, state: NodeState) -> NodeState:
        self.state = state
        return state
