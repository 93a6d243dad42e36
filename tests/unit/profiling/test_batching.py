"""profiling.batching: a node's /metrics read twice, as prometheus-client renders it (a counter's
``_created`` samples beside its ``_total``), and the batching between the two reads."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from profiling.batching import Batching, batching, scrape
from tests.canned_http import Answer, canned_server


def _metrics(requests: int, frames: tuple[int, int], calls: tuple[int, int]) -> bytes:
    """/metrics of a coordinator that answered ``requests`` PUTs and sent two peers ``frames`` holding
    ``calls``, as the node renders its counters."""
    registry = CollectorRegistry()
    answered = Counter("kvnode_requests", "client requests", ["op", "status"], registry=registry)
    answered.labels("put", "201").inc(requests)
    answered.labels("get", "200")  # exported at 0, as a node exports every series it can answer
    sent_frames = Counter("kvnode_peer_frames_sent", "frames", ["peer"], registry=registry)
    sent_calls = Counter("kvnode_peer_calls_sent", "calls", ["peer"], registry=registry)
    for peer, frame_count, call_count in zip(("b", "c"), frames, calls, strict=True):
        sent_frames.labels(peer).inc(frame_count)
        sent_calls.labels(peer).inc(call_count)
    return generate_latest(registry)


def test_batching_between_two_scrapes_counts_every_label_and_nothing_else() -> None:
    pages = {
        "/before/metrics": Answer(200, _metrics(10, (5, 5), (10, 10))),
        "/after/metrics": Answer(200, _metrics(1010, (65, 60), (1010, 1010))),
    }
    with canned_server(pages) as server:
        before, after = scrape(f"{server.url}/before"), scrape(f"{server.url}/after")
    figures = batching(before, after)
    assert figures == Batching(requests=1000, frames=115, calls=2000)
    assert figures.frames_per_request == 0.115
    assert figures.calls_per_frame is not None and round(figures.calls_per_frame, 2) == 17.39


def test_an_idle_node_has_no_ratio() -> None:
    idle = Batching(requests=0, frames=0, calls=0)
    assert idle.calls_per_frame is None and idle.frames_per_request is None
