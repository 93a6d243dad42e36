"""``python -m loadtest wan``'s figures: the clusters it measures (their shapes and levels), what was
asked and measured (wan.json), and the percentiles of a run, without the bed that measures them
(:mod:`loadtest.wan`) or the report drawn from them (:mod:`loadtest.wan_report`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtest.workload import Op

__all__ = ["OPS", "ROUND_TRIP_PROBES", "SHAPES", "START_S", "Shape", "Wan", "percentiles"]

OPS: tuple[Op, ...] = ("put", "get")
ROUND_TRIP_PROBES = 50  # TCP connects a figure of the bed rests on
START_S = 8.0  # a guess at a cluster's start, fill and stop, for progress lines only


@dataclass(frozen=True)
class Shape:
    """A cluster measured: its members' roles in the bed (e: the client's datacenter, w: the other), and
    the levels it is asked at."""

    name: str
    roles: tuple[str, ...]
    levels: tuple[str, ...]

    @property
    def datacenters(self) -> tuple[str, ...]:
        """Each member's datacenter (--datacenters), () for one datacenter."""
        names = tuple("dc1" if role.startswith("e") else "dc2" for role in self.roles)
        return names if len(set(names)) > 1 else ()


SHAPES = (
    Shape("1 datacenter", ("e1", "e2", "e3"), ("quorum",)),
    Shape("2 datacenters", ("e1", "e2", "e3", "w1", "w2", "w3"), ("local_quorum", "quorum", "each_quorum")),
)


@dataclass
class Wan:
    """What was asked and what was measured (wan.json)."""

    round_trip_ms: float
    rate: float
    duration_s: float
    warmup_s: float
    rounds: int
    keys: int
    value_size: int
    cores: int
    command: str = ""
    when: str = ""
    bed: dict[str, Any] = field(default_factory=dict)  # round trips, the delay line's figures
    runs: list[dict[str, Any]] = field(default_factory=list)  # one per shape, level, op and round

    @property
    def planned_seconds(self) -> float:
        levels = sum(len(shape.levels) for shape in SHAPES)
        return self.rounds * (len(SHAPES) * START_S + levels * (self.warmup_s + len(OPS) * self.duration_s))


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50 and p99 of some samples, in their unit.

    >>> percentiles([float(value) for value in range(1, 101)])
    {'p50': 50.5, 'p99': 99.01}
    """
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(statistics.median(values), 3), "p99": round(cuts[98], 3)}
