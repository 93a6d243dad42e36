"""The state of a node's data (kvnode.repair.rebuild_state), driven by hand through every transition: the
test feeds what peers remembered and when the rebuild completed, no loop, no sockets."""

from __future__ import annotations

import pytest

from kvnode.repair.rebuild_state import NodeState, RebuildState

OWN, OTHER = "a1" * 16, "0f" * 16


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
    ("remembered", "state"),
    [
        ("", NodeState.SERVING),  # a new cluster's first start: nobody knew this URL
        (OTHER, NodeState.REBUILDING),  # this URL was another node: this one lost its disk
        (OWN, NodeState.SERVING),  # the peer already met this very node
    ],
    ids=["none", "another", "this-node"],
)
def test_the_first_peer_met_decides_an_unknown_node(remembered: str, state: NodeState) -> None:
    machine = RebuildState(NodeState.UNKNOWN)
    assert machine.peer_met(remembered, OWN) is state
    assert machine.state is state
    assert machine.serving is (state is NodeState.SERVING)


@pytest.mark.parametrize("state", [NodeState.SERVING, NodeState.REBUILDING])
@pytest.mark.parametrize("remembered", ["", OTHER, OWN])
def test_once_decided_later_peers_change_nothing(state: NodeState, remembered: str) -> None:
    machine = RebuildState(state)
    assert machine.peer_met(remembered, OWN) is None
    assert machine.state is state


def test_a_rebuild_ends_serving_and_only_a_rebuild_can_end() -> None:
    machine = RebuildState(NodeState.UNKNOWN)
    assert machine.rebuilt() is None  # not rebuilding: nothing to end
    assert machine.peer_met(OTHER, OWN) is NodeState.REBUILDING
    assert not machine.serving
    assert machine.rebuilt() is NodeState.SERVING
    assert machine.state is NodeState.SERVING
    assert machine.rebuilt() is None
