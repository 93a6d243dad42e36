"""A figure's description (kvnode.figures): read from a part's attributes, shown in JSON and as Prometheus
samples the way its row says; a malformed one refused where it is written."""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass, field

import pytest

from kvnode.figures import Figure, Figures, Kind

PEERS = ["http://b", "http://c"]


class Light(enum.Enum):
    GREEN = "green"
    RED = "red"


@dataclass
class Totals:
    sent: int = 0
    received: int = 0


@dataclass
class Part:
    """A part's counters, as a subsystem keeps them: plain attributes, a counter by peer, a method."""

    done: int = 0
    ready: bool = False
    lead_us: int = 0
    kept: collections.Counter[str] = field(default_factory=collections.Counter)
    totals: Totals = field(default_factory=Totals)
    far: tuple[str, ...] = ()

    def light(self) -> Light:
        return Light.RED if self.far else Light.GREEN


TABLE = Figures("part", (
    Figure("done", Kind.COUNTER, "Done", "kvnode_done"),
    Figure("ready", Kind.GAUGE, "1 when ready", "kvnode_ready"),
    Figure("lead_us", Kind.GAUGE, "Ahead", "kvnode_lead_seconds", key="lead_ms", micros=True),
    Figure("kept", Kind.COUNTER, "Kept, by peer", "kvnode_kept", by="peer", every_peer=True),
    Figure("totals.sent", Kind.COUNTER, "Moved", "kvnode_moved", key="moved.sent", label=("way", "sent")),
    Figure("totals.received", Kind.COUNTER, "Moved", "kvnode_moved", key="moved.received",
           label=("way", "received")),
    Figure("far", Kind.TEXT, "who is far"),
    Figure("light", Kind.GAUGE, "1 for the light's colour", "kvnode_light", states=("green", "red")),
))  # fmt: skip


def test_a_reading_is_the_parts_figures_then_and_stays_so() -> None:
    part = Part(done=2, ready=True, lead_us=2500, far=("http://c",))
    part.kept["http://b"] += 3
    part.totals.sent = 7
    reading = TABLE.read(part)
    part.done += 1
    part.kept["http://b"] += 1  # the counters go on; the reading is a copy
    assert reading.values == {
        "done": 2, "ready": True, "lead_us": 2500, "kept": {"http://b": 3}, "totals.sent": 7,
        "totals.received": 0, "far": ("http://c",), "light": "red",
    }  # fmt: skip


def test_json_nests_dotted_keys_in_milliseconds_and_names_every_peer_only_when_asked() -> None:
    part = Part(lead_us=1234, far=("http://c",))
    part.kept["http://b"] += 1
    reading = TABLE.read(part)
    assert reading.json() == {
        "done": 0, "ready": False, "lead_ms": 1.234, "kept": {"http://b": 1},
        "moved": {"sent": 0, "received": 0}, "far": ["http://c"], "light": "red",
    }  # fmt: skip
    assert reading.json(PEERS)["kept"] == {"http://b": 1, "http://c": 0}


def test_samples_by_label_state_and_peer_in_seconds() -> None:
    rows = {row.source: row for row in TABLE.rows}
    assert rows["ready"].samples(True, PEERS) == [((), 1)]
    assert rows["lead_us"].samples(2_500_000, PEERS) == [((), 2.5)]
    assert rows["kept"].samples({"http://c": 4}, PEERS) == [(("http://b",), 0), (("http://c",), 4)]
    assert rows["totals.received"].samples(5, PEERS) == [(("received",), 5)]
    assert rows["light"].samples("red", PEERS) == [(("green",), 0), (("red",), 1)]
    by_reason = Figure("dropped", Kind.COUNTER, "Dropped", "kvnode_dropped", by="reason")
    assert by_reason.samples({"window": 1, "full": 2}, PEERS) == [(("full",), 2), (("window",), 1)]
    assert [row.label_names for row in TABLE.rows if row.metric] == [
        (), (), (), ("peer",), ("way",), ("way",), ("state",),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("figure", "why"),
    [
        (lambda: Figure("far", Kind.TEXT, "who", "kvnode_far"), "a text has no metric"),
        (lambda: Figure("done", Kind.COUNTER, "Done"), "a number has one"),
        (lambda: Figure("done", Kind.COUNTER, "Done", "done"), "starts with kvnode_"),
        (lambda: Figures("t", (Figure("far", Kind.TEXT, "a"), Figure("far", Kind.TEXT, "b"))), "twice"),
    ],
)
def test_a_malformed_description_is_refused_where_it_is_written(figure: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        figure()  # type: ignore[operator]
