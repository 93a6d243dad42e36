"""The scaling measurement's figures (pure): the shapes measured (members, on how many modelled hosts),
and each figure's median and range over a shape's runs with its number of samples. loadtest.scale_report
draws its words from them.

>>> Shape(12, 2).label, Shape(3, 2).label, Shape(3, 16).label
('12 members, 6 hosts of 2', '3 members, 2 hosts of 2+1', '3 members, 1 host of 3')
>>> Figure.of([3.0, 1.0, 2.0]).text("{:.0f}")
'2 (1-3, n=3)'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadtest.report import MIN_RUN_REQUESTS, MIN_RUN_S

__all__ = [
    "Figure",
    "Run",
    "Shape",
    "ShapeSummary",
    "pooled",
    "round_ratios",
    "shape_of",
    "summarise",
    "too_short",
    "work_us",
]

Run = dict[str, Any]


@dataclass(frozen=True, order=True)
class Shape:
    """``members`` nodes on modelled hosts (127.0.0.1, .2, ...) of at most ``per_host`` members each, filled
    in order as ``cluster --machines`` fills them."""

    members: int
    per_host: int

    @property
    def hosts(self) -> int:
        return math.ceil(self.members / self.per_host)

    @property
    def label(self) -> str:
        counts = [self.per_host] * (self.hosts - 1) + [self.members - (self.hosts - 1) * self.per_host]
        each = str(counts[0]) if len(set(counts)) == 1 else "+".join(map(str, counts))
        return f"{self.members} members, {self.hosts} host{'s' * (self.hosts > 1)} of {each}"

    @property
    def tick(self) -> str:
        """The label on a plot's axis, in two lines."""
        return self.label.replace(", ", "\n", 1)


def shape_of(run: Run) -> Shape:
    return Shape(run["members"], run["per_host"])


@dataclass(frozen=True)
class Figure:
    """One figure over a shape's runs: the median, the lowest and highest, how many runs."""

    median: float
    low: float
    high: float
    samples: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Figure:
        return cls(statistics.median(values), min(values), max(values), len(values))

    def text(self, number: str) -> str:
        if self.samples == 1:
            return f"{number.format(self.median)} (n=1)"
        low, high = number.format(self.low), number.format(self.high)
        return f"{number.format(self.median)} ({low}-{high}, n={self.samples})"

    def below(self, other: Figure) -> bool:
        """Whether every sample of this figure is below every sample of ``other`` (their ranges apart)."""
        return self.high < other.low


@dataclass(frozen=True)
class ShapeSummary:
    shape: Shape
    runs: int
    requests: int  # over its runs
    shortest_s: float
    invalid: int  # runs the generator or errors made INVALID
    throughput: Figure  # requests that succeeded per second
    p99_ms: Figure
    calls: Figure | None  # replica calls per request; None where no node exposed the counters
    cpu_us: Figure | None  # server CPU per request, every node process summed
    work_us: Figure | None  # the same, less what the idle cluster uses over as long
    idle: Run | None  # the idle readings pooled: idle_s, idle_cpu_s, idle_calls (every op), readings


def work_us(run: Run, idle: Run | None) -> float | None:
    """Server CPU per request less the idle cluster's own CPU over the run's span: the work the requests
    themselves cost. None without an idle reading or requests."""
    if idle is None or not idle["idle_s"] or not run["requests"]:
        return None
    background = idle["idle_cpu_s"] / idle["idle_s"] * run["cpu_span_s"]
    return float((run["server_cpu_s"] - background) * 1e6 / run["requests"])


def pooled(readings: Sequence[Run]) -> Run | None:
    """Idle readings of one shape as one: their seconds, CPU and calls summed, and how many (None: none)."""
    if not readings:
        return None
    calls = [row["idle_calls"] for row in readings]
    return {
        **readings[0],
        "idle_s": sum(row["idle_s"] for row in readings),
        "idle_cpu_s": sum(row["idle_cpu_s"] for row in readings),
        "idle_calls": None if None in calls else sum(calls),
        "readings": len(readings),
    }


def _round_reading(idle: Sequence[Run], run: Run) -> Run | None:
    """The idle reading taken on ``run``'s cluster before it (its shape, its round), where the readings say
    their rounds."""
    shape, repeat = shape_of(run), run["repeat"]
    return next((row for row in idle if shape_of(row) == shape and row.get("repeat") == repeat), None)


def summarise(runs: Sequence[Run], idle: Sequence[Run]) -> list[ShapeSummary]:
    """Each shape's figures over its runs, smallest shape first; ``idle``: the idle readings, one a shape
    a round (``repeat``), each taken from its round's run; the summary's idle reading is them pooled."""
    summaries = []
    for shape in sorted({shape_of(run) for run in runs}):
        mine = [run for run in runs if shape_of(run) == shape]
        readings = [row for row in idle if shape_of(row) == shape]
        idle_row = pooled(readings)
        calls = [run["replica_calls"]["per_request"] for run in mine if run["replica_calls"]]
        cpu = [run["server_cpu_us_per_request"] for run in mine if run["server_cpu_us_per_request"]]
        work = [
            value
            for run in mine
            if (value := work_us(run, _round_reading(readings, run) or idle_row)) is not None
        ]
        summaries.append(
            ShapeSummary(
                shape=shape,
                runs=len(mine),
                requests=sum(run["requests"] for run in mine),
                shortest_s=min(run["duration_s"] for run in mine),
                invalid=sum(1 for run in mine if not run["valid"]),
                throughput=Figure.of([run["achieved_rate"] for run in mine]),
                p99_ms=Figure.of([run["latency_ms"]["p99"] for run in mine]),
                calls=Figure.of(calls) if calls else None,
                cpu_us=Figure.of(cpu) if cpu else None,
                work_us=Figure.of(work) if work else None,
                idle=idle_row,
            )
        )
    return summaries


def round_ratios(
    runs: Sequence[Run], idle: Sequence[Run], small: Shape, large: Shape
) -> tuple[Figure, Figure] | None:
    """Each round's ``large`` run against the same round's ``small`` one, minutes apart: server CPU per
    request less idle (each run less its own round's reading), then with the idle background; None for
    fewer than two rounds that measured both."""
    rounds = {(shape_of(run), run["repeat"]): run for run in runs}
    less_idle, total = [], []
    for repeat in sorted({run["repeat"] for run in runs}):
        little, big = rounds.get((small, repeat)), rounds.get((large, repeat))
        if little is None or big is None or not (little["requests"] and big["requests"]):
            continue
        total.append(big["server_cpu_us_per_request"] / little["server_cpu_us_per_request"])
        works = [work_us(run, _round_reading(idle, run)) for run in (little, big)]
        if works[0] and works[1] is not None:
            less_idle.append(works[1] / works[0])
    if len(less_idle) < 2:
        return None
    return Figure.of(less_idle), Figure.of(total)


def too_short(summaries: Sequence[ShapeSummary]) -> bool:
    """Whether some shape's runs are too short or too few requests to compare (loadtest.report's minimums)."""
    return any(row.shortest_s < MIN_RUN_S or row.requests < MIN_RUN_REQUESTS * row.runs for row in summaries)
