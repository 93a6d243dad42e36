"""The replica channel's batching at the coordinator over a load, from its ``/metrics`` read before and
after: the client requests it answered, the frames of replica calls it sent its peers and the calls in
them, so calls per frame and frames per request (docs/metrics.md names the counters).

These are counts, not samples: over a load they are exact whatever else the machine ran, though how many
calls a frame carries depends on how many requests share an event-loop tick (the calls of one tick leave
in one frame), so on the concurrency and on how much CPU the coordinator gets.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Batching", "Scrape", "batching", "delta", "scrape"]

Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Every sample of a node's /metrics: (name, sorted labels) -> value."""

_REQUESTS = "kvnode_requests_total"  # client entity requests answered, every operation and status
_FRAMES_SENT = "kvnode_peer_frames_sent_total"
_CALLS_SENT = "kvnode_peer_calls_sent_total"


def scrape(url: str) -> Scrape:
    """Every sample of a node's /metrics, by name and labels."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10.0) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def delta(before: Scrape, after: Scrape, name: str) -> float:
    """How much the samples named ``name`` grew between two scrapes, every label summed."""

    def total(samples: Scrape) -> float:
        return sum(value for (found, _), value in samples.items() if found == name)

    return total(after) - total(before)


@dataclass(frozen=True)
class Batching:
    """What one node did over a load, by its counters: ``requests`` answered, ``frames`` of replica calls
    sent to its peers (each one write to a peer's socket), and the ``calls`` in them.

    >>> figures = Batching(requests=1000, frames=125, calls=2000)
    >>> figures.calls_per_frame, figures.frames_per_request
    (16.0, 0.125)
    >>> Batching(0, 0, 0).calls_per_frame is None
    True
    """

    requests: float
    frames: float
    calls: float

    @property
    def calls_per_frame(self) -> float | None:
        return self.calls / self.frames if self.frames else None

    @property
    def frames_per_request(self) -> float | None:
        return self.frames / self.requests if self.requests else None


def batching(before: Scrape, after: Scrape) -> Batching:
    """A node's batching between two scrapes of its /metrics.

    >>> requests, frames, calls = (("kvnode_requests_total", (("op", "put"), ("status", "201"))),
    ...                            ("kvnode_peer_frames_sent_total", (("peer", "b"),)),
    ...                            ("kvnode_peer_calls_sent_total", (("peer", "b"),)))
    >>> batching({requests: 10, frames: 20, calls: 20}, {requests: 110, frames: 30, calls: 220})
    Batching(requests=100, frames=10, calls=200)
    """
    return Batching(
        requests=delta(before, after, _REQUESTS),
        frames=delta(before, after, _FRAMES_SENT),
        calls=delta(before, after, _CALLS_SENT),
    )
