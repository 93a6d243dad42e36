"""The state of a node's data (kvnode.healing.rebuild_state), driven by hand through every transition: the
test feeds what peers remembered and when the rebuild completed, no loop, no sockets."""

from __future__ import annotations

import pytest

from kvnode.healing.rebuild_state import RebuildState
from kvnode.replica.readiness import NodeState

OWN, OTHER, OLDER = "a1" * 16, "0f" * 16, "0e" * 16


@pytest.mark.parametrize(
    ("saved", "members", "state"),
    [
        ("", 3, NodeState.SERVING),  # an existing data dir, whole
        ("unknown", 3, NodeState.UNKNOWN),  # a new data dir (or one that crashed before a peer answered)
        ("rebuilding", 3, NodeState.REBUILDING),  # a crash during the rebuild: it resumes
        ("unknown", 1, NodeState.SERVING),  # a cluster of one has nobody to ask or rebuild from
        ("rebuilding", 1, NodeState.SERVING),
    ],
)
def test_the_state_at_start_comes_from_the_saved_one(saved: str, members: int, state: NodeState) -> None:
    assert RebuildState.at_start(saved, members).state is state


@pytest.mark.parametrize(
    ("remembered", "replaced", "state"),
    [
        ("", "", NodeState.SERVING),  # a new cluster's first start: nobody knew this URL
        (OTHER, "", NodeState.REBUILDING),  # this URL was another node: this one lost its disk
        (OTHER, OLDER, NodeState.REBUILDING),  # ... and that one had replaced an older one
        # The peer met this very node already (a handshake the other way completed first, or its answer
        # was lost in a crash): what it replaced says what the URL was before.
        (OWN, "", NodeState.SERVING),
        (OWN, OTHER, NodeState.REBUILDING),
    ],
    ids=["none", "another", "another-again", "this-node-new", "this-node-replacing"],
)
def test_the_first_peer_met_decides_an_unknown_node(remembered: str, replaced: str, state: NodeState) -> None:
    machine = RebuildState(NodeState.UNKNOWN)
    assert machine.peer_met(remembered, replaced, OWN) is state
    assert machine.state is state
    assert machine.serving is (state is NodeState.SERVING)
    assert machine.known_as == ("" if state is NodeState.SERVING else OTHER)


@pytest.mark.parametrize("state", [NodeState.SERVING, NodeState.REBUILDING])
@pytest.mark.parametrize(("remembered", "replaced"), [("", ""), (OTHER, ""), (OWN, ""), (OWN, OTHER)])
def test_once_decided_later_peers_change_nothing(state: NodeState, remembered: str, replaced: str) -> None:
    machine = RebuildState(state)
    assert machine.peer_met(remembered, replaced, OWN) is None
    assert machine.state is state


def test_a_rebuild_ends_serving_and_only_a_rebuild_can_end() -> None:
    machine = RebuildState(NodeState.UNKNOWN)
    assert machine.rebuilt() is None  # not rebuilding: nothing to end
    assert machine.peer_met(OTHER, "", OWN) is NodeState.REBUILDING
    assert not machine.serving
    assert machine.rebuilt() is NodeState.SERVING
    assert machine.state is NodeState.SERVING
    assert machine.rebuilt() is None
