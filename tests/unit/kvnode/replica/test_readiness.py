"""kvnode.replica.readiness: a replica's state is the word a CLOCK answer and a handshake carry."""

from __future__ import annotations

from kvnode.replica.channel import wire
from kvnode.replica.readiness import NodeState


def test_a_state_travels_as_its_word_and_reads_back_as_itself() -> None:
    for state in NodeState:
        _, said = wire.decode_clock(wire.encode_clock(1, state))
        assert NodeState(said) is state
    assert [str(state) for state in NodeState] == ["unknown", "rebuilding", "serving"]
    assert f"{NodeState.REBUILDING}" == "rebuilding"  # as a refusal's message says it
