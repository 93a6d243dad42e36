"""A node's figures, each described once: the table beside a part's counters says, for each figure, which
attribute holds it, what kind it is, its help text, its Prometheus name and its JSON key. Everything that
shows figures (the node's snapshot, ``/v0/stats``, ``/v0/cluster``, ``/metrics``, hence ``admin``) renders
them from these tables (kvnode.node.snapshot, .stats and .exporter); the part itself only adds to plain
attributes.

>>> class Counts:
...     done = 3
...     lead_us = 1500
...     by_peer = {"http://b": 2}
>>> table = Figures("demo", (
...     Figure("done", Kind.COUNTER, "Things done", "kvnode_done"),
...     Figure("lead_us", Kind.GAUGE, "How far ahead", "kvnode_lead_seconds", key="lead_ms", micros=True),
...     Figure("by_peer", Kind.GAUGE, "By peer", "kvnode_by_peer", by="peer", every_peer=True),
... ))
>>> reading = table.read(Counts())
>>> reading.json()
{'done': 3, 'lead_ms': 1.5, 'by_peer': {'http://b': 2}}
>>> table.rows[1].samples(reading.values["lead_us"], ["http://b"])
[((), 0.0015)]
>>> table.rows[2].samples(reading.values["by_peer"], ["http://b", "http://c"])
[(('http://b',), 2), (('http://c',), 0)]
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

__all__ = ["Figure", "Figures", "Kind", "Reading", "Values"]

Values = dict[str, Any]  # a table's figures as read, by Figure.source
Sample = tuple[tuple[str, ...], float]  # a Prometheus sample: the figure's own label values, the value


class Kind(enum.Enum):
    COUNTER = "counter"  # only grows, since start (Prometheus adds ``_total``)
    GAUGE = "gauge"  # as it is now
    TEXT = "text"  # words, not a number: JSON only


@dataclass(frozen=True, slots=True)
class Figure:
    source: str  # the attribute (a dotted path reads further; a method is called) that holds it
    kind: Kind
    help: str  # Prometheus's help text (figures that share a metric share it), or what a text says
    metric: str = ""  # its Prometheus name, kvnode_* (a counter's without _total); none for a text
    key: str = ""  # its JSON key (default: the source's last part); "records.sent" nests it
    label: tuple[str, str] | None = None  # one of several figures in one metric: (label, this one's value)
    by: str = ""  # a mapping: the label its keys are in
    every_peer: bool = False  # a mapping by peer: every peer shown, 0 included (in /metrics, /v0/cluster)
    states: tuple[str, ...] = ()  # a state's name: a metric per state, 1 for the one it is in
    micros: bool = False  # in microseconds: shown in milliseconds in JSON, in seconds in /metrics

    def __post_init__(self) -> None:
        if (self.kind is Kind.TEXT) != (not self.metric):
            raise ValueError(f"{self.source}: a text has no metric, and a number has one")
        if self.metric and not self.metric.startswith("kvnode_"):
            raise ValueError(f"{self.source}: a metric's name starts with kvnode_, got {self.metric!r}")

    @property
    def json_key(self) -> str:
        return self.key or self.source.rpartition(".")[2]

    @property
    def label_names(self) -> tuple[str, ...]:
        """The labels of its metric, beyond those of the table's (a peer's)."""
        if self.label is not None:
            return (self.label[0],)
        if self.by:
            return (self.by,)
        return ("state",) if self.states else ()

    def to_json(self, value: Any, peers: Sequence[str] | None = None) -> Any:
        """Its value as JSON shows it; with ``peers``, a mapping by every peer names each of them."""
        if isinstance(value, Mapping):
            shown = {key: self.to_json(item) for key, item in value.items()}
            return {peer: shown.get(peer, 0) for peer in peers} if self.every_peer and peers else shown
        if isinstance(value, tuple):
            return list(value)
        if self.micros:
            return value / 1000
        return round(value, 3) if isinstance(value, float) else value

    def samples(self, value: Any, peers: Sequence[str]) -> list[Sample]:
        """Its value as Prometheus samples: a mapping's by key (by every peer in ``peers``, 0 included,
        when it is by peer), a state's one per state."""
        if self.states:
            return [((state,), 1 if value == state else 0) for state in self.states]
        if self.by:
            items = [(p, value.get(p, 0)) for p in peers] if self.every_peer else sorted(value.items())
            return [((key,), self._number(item)) for key, item in items]
        return [((self.label[1],) if self.label else (), self._number(value))]

    def _number(self, value: float) -> float:
        return value / 1e6 if self.micros else int(value) if isinstance(value, bool) else value


@dataclass(frozen=True, slots=True)
class Figures:
    """One part's figures: ``group`` names them in the node's snapshot, ``section`` is the JSON object
    ``/v0/stats`` shows them in (the group's name unless tables share one)."""

    group: str
    rows: tuple[Figure, ...]
    section: str = ""

    def __post_init__(self) -> None:
        if len({row.source for row in self.rows}) != len(self.rows):
            raise ValueError(f"{self.group}: a figure is described twice")

    def read(self, source: object) -> Reading:
        """Every figure's value now; mappings copied, enums by value, so the reading stays as it was."""
        values: Values = {}
        for row in self.rows:
            value = attrgetter(row.source)(source)
            value = value() if callable(value) else value
            if isinstance(value, Mapping):
                value = dict(value)
            values[row.source] = value.value if isinstance(value, enum.Enum) else value
        return Reading(self, values)


@dataclass(frozen=True, slots=True)
class Reading:
    """One table's figures as read at one moment."""

    table: Figures
    values: Values

    def json(self, peers: Sequence[str] | None = None) -> dict[str, Any]:
        """As JSON shows it: a key per figure (nested where the key says); with ``peers``, a mapping by
        every peer names each of them."""
        shown: dict[str, Any] = {}
        for row in self.table.rows:
            value = row.to_json(self.values[row.source], peers)
            head, _, tail = row.json_key.partition(".")
            if tail:
                shown.setdefault(head, {})[tail] = value
            else:
                shown[head] = value
        return shown
