"""kvnode.replica.peer_figures: a peer's figures read from what a peer shows operators; its state is one
/metrics sample per state, its numbers and texts as /v0/cluster shows them."""

from __future__ import annotations

from dataclasses import dataclass

from kvnode.replica.peer_figures import PEER_FIGURES
from kvnode.replica.peer_state import PeerState


@dataclass
class Shown:
    """What a PeerReplica shows of itself, as its properties do."""

    state: str = "connected"
    down_for_value: float = 0.0
    phi: float = 0.5
    distance: float = 0.1
    protocol: int = 2
    frames_sent: int = 3
    calls_sent: int = 40
    refusal: str = ""
    node_state: str = "serving"

    def down_for(self) -> float:
        return self.down_for_value


def test_a_peers_figures_read_as_cluster_view_and_metrics_show_them() -> None:
    reading = PEER_FIGURES.read(Shown(down_for_value=1.25))
    assert reading.json() == {
        "state": "connected",
        "down_for_s": 1.25,
        "phi": 0.5,
        "distance_s": 0.1,
        "protocol": 2,
        "frames_sent": 3,
        "calls_sent": 40,
        "refusal": "",
        "node_state": "serving",
    }
    state = next(row for row in PEER_FIGURES.rows if row.source == "state")
    samples = dict(state.samples(reading.values["state"], []))
    assert set(samples) == {(s.value,) for s in PeerState} and samples[("connected",)] == 1
    assert sum(samples.values()) == 1
