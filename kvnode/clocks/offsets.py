"""Each peer's wall-clock offset from this node, estimated from the replica channel's clock calls (pure).

A measurement is one round trip: this node's wall clock when it sent the call, the peer's wall clock in
its answer, and this node's wall clock when the answer came back. The peer read its clock somewhere in
that round trip, so its offset is the difference from the midpoint, give or take half the round trip
(its uncertainty), as in CockroachDB's remote clock monitor. :class:`ClockOffsets` keeps each peer's
recent measurements, forgets those older than ``max_age_s``, and estimates a peer's offset by the most
certain (the shortest round trip is the least disturbed by queueing) of those that agree with the newest
(their ranges overlap), so a clock that was stepped is judged by its new offset at once.

>>> offsets = ClockOffsets(max_age_s=10.0)
>>> offsets.record("http://b:1", measure(sent_us=1_000, remote_us=61_500, received_us=2_000), at_s=0.0)
>>> offsets.estimates(now_s=1.0)
{'http://b:1': Offset(offset_us=60000, uncertainty_us=500)}
>>> offsets.estimates(now_s=11.0)     # aged out: no estimate
{}
"""

from __future__ import annotations

import collections
from typing import NamedTuple

__all__ = ["ClockOffsets", "Offset", "measure"]

_KEPT = 8  # measurements kept per peer: a few round trips, so one slow one does not decide


class Offset(NamedTuple):
    """A peer's wall clock minus this node's, and how far off that figure may be (both microseconds)."""

    offset_us: int
    uncertainty_us: int


def measure(*, sent_us: int, remote_us: int, received_us: int) -> Offset:
    """The offset one round trip shows (a clock stepping back mid-call counts as no round trip)."""
    half_trip = max(0, received_us - sent_us) // 2
    return Offset(remote_us - (sent_us + half_trip), half_trip)


class ClockOffsets:
    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._recent: dict[str, collections.deque[tuple[float, Offset]]] = {}

    def record(self, peer: str, offset: Offset, *, at_s: float) -> None:
        """Keep one measurement of ``peer`` taken at ``at_s`` (monotonic seconds)."""
        recent = self._recent.get(peer)
        if recent is None:
            recent = self._recent[peer] = collections.deque(maxlen=_KEPT)
        recent.append((at_s, offset))

    def estimates(self, now_s: float) -> dict[str, Offset]:
        """Each peer measured within ``max_age_s``: the most certain recent measurement that agrees with
        its newest."""
        oldest = now_s - self.max_age_s
        found = {}
        for peer, recent in self._recent.items():
            while recent and recent[0][0] < oldest:
                recent.popleft()
            if recent:
                _, last = recent[-1]
                found[peer] = min((o for _, o in recent if _agree(o, last)), key=lambda o: o.uncertainty_us)
        return found


def _agree(one: Offset, other: Offset) -> bool:
    """Whether two measurements' ranges (offset give or take uncertainty) overlap."""
    return abs(one.offset_us - other.offset_us) <= one.uncertainty_us + other.uncertainty_us
