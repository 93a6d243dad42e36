"""Whether this node's data is whole: the state machine that recognises a node whose disk was lost, and
follows its rebuild. Pure: the node feeds it what its peers say and what the rebuild did, saves the state it
returns (kvnode.system_db.NodeIdentity), and acts on it (kvnode.repair.rebuild).

    unknown     the system database was new at this start: a new cluster's first start, or a member whose
                disk was lost; the first peer to complete a handshake tells which
    rebuilding  a peer remembered another identity for this node's URL: the node was a member and lost
                its data; it gets its records back from every peer
    serving     the data is whole

While not serving, the node takes writes as usual, but its reads answer "not ready" (a failed replica).

>>> machine = RebuildState.at_start(saved="unknown", members=3)
>>> machine.peer_met(remembered="", own="a1").value        # a new cluster: nobody knew this node
'serving'
>>> machine = RebuildState.at_start(saved="unknown", members=3)
>>> machine.peer_met(remembered="0f", own="a1").value      # a peer knew this URL as another node
'rebuilding'
>>> machine.peer_met(remembered="", own="a1") is None      # decided: later handshakes change nothing
True
>>> machine.rebuilt().value
'serving'
"""

from __future__ import annotations

import enum

__all__ = ["NodeState", "RebuildState"]


class NodeState(enum.StrEnum):
    UNKNOWN = "unknown"
    REBUILDING = "rebuilding"
    SERVING = "serving"


class RebuildState:
    """One node's state; each event returns the new state when it changed (to save before acting on it),
    None when it did not."""

    def __init__(self, state: NodeState) -> None:
        self.state = state

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

    def peer_met(self, remembered: str, own: str) -> NodeState | None:
        """A peer completed a handshake, saying which identity it remembered for this node's URL
        (``remembered``, "" if none); ``own`` is this node's identity."""
        if self.state is not NodeState.UNKNOWN:
            return None
        if remembered and remembered != own:
            return self._to(NodeState.REBUILDING)
        return self._to(NodeState.SERVING)

    def rebuilt(self) -> NodeState | None:
        """A full repair with every peer completed."""
        if self.state is not NodeState.REBUILDING:
            return None
        return self._to(NodeState.SERVING)

    def _to(self, state: NodeState) -> NodeState:
        self.state = state
        return state
