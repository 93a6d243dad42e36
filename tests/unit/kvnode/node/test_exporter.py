"""The node's /metrics (kvnode.node.exporter), from a node's parts in this process: each figure as its
table describes it, figures that share a metric in one family, each peer's labelled with its URL; the
replica channel's frames and calls, sent and answered."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvnode.node.parts import NodeParts
from kvnode.replica.peer_state import PeerState
from tests.drivers import Serve, ServedNode, served_members, until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scraped(parts: NodeParts) -> tuple[str, Samples]:
    text = generate_latest(parts.metrics.registry).decode()
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return text, samples


async def test_figures_that_share_a_metric_are_one_family_by_their_label(
    one_of_three: ServedNode,
) -> None:
    parts = one_of_three.parts
    counts = parts.gc.counts
    counts.tombstones_dropped, counts.expired_dropped, counts.unowned_dropped = 3, 2, 1
    parts.anti_entropy.totals.received = 5
    text, samples = scraped(parts)
    assert text.count("# TYPE kvnode_gc_dropped_total counter") == 1
    dropped = {
        dict(labels)["kind"]: v for (name, labels), v in samples.items() if name == "kvnode_gc_dropped_total"
    }
    assert dropped == {"tombstone": 3, "expired": 2, "unowned": 1}
    assert samples["kvnode_repair_records_total", frozenset({("direction", "received")})] == 5


async def test_a_figure_by_peer_names_every_peer_and_a_peers_state_is_one_of_its_states(
    one_of_three: ServedNode,
) -> None:
    parts = one_of_three.parts
    first, second = parts.membership.urls[1:]
    parts.hints.kept[first] += 4
    _, samples = scraped(parts)
    kept = {
        dict(labels)["peer"]: v for (name, labels), v in samples.items() if name == "kvnode_hints_kept_total"
    }
    assert kept == {first: 4, second: 0}
    for peer in (first, second):
        states = {
            dict(labels)["state"]: v
            for (name, labels), v in samples.items()
            if name == "kvnode_peer_state" and ("peer", peer) in labels
        }
        assert set(states) == {state.value for state in PeerState}
        assert sorted(states.values()) == [0] * (len(states) - 1) + [1]
        assert ("kvnode_peer_down_seconds", frozenset({("peer", peer)})) in samples


async def test_a_state_a_flag_and_microseconds_are_numbers_in_seconds(one_of_three: ServedNode) -> None:
    _, samples = scraped(one_of_three.parts)
    node_states = {
        dict(labels)["state"]: v for (name, labels), v in samples.items() if name == "kvnode_node_state"
    }
    assert sum(node_states.values()) == 1 and set(node_states) == {"unknown", "rebuilding", "serving"}
    assert samples["kvnode_repair_summaries_ready", frozenset()] in (0, 1)
    assert samples["kvnode_clock_fenced", frozenset()] == 0
    assert samples["kvnode_clock_lead_seconds", frozenset()] < 1  # not microseconds


async def test_requests_by_status_are_there_at_0_from_the_start(one_of_three: ServedNode) -> None:
    parts = one_of_three.parts
    parts.metrics.requests("get", (200, 404))
    _, samples = scraped(parts)
    assert samples["kvnode_requests_total", frozenset({("op", "get"), ("status", "404")})] == 0
    assert ("kvnode_event_loop_lag_seconds_count", frozenset()) in samples


def by_peer(samples: Samples, name: str) -> dict[str, float]:
    return {dict(labels)["peer"]: value for (found, labels), value in samples.items() if found == name}


async def test_the_frames_and_calls_of_the_replica_channel_are_counted_at_both_ends(serve: Serve) -> None:
    nodes = await served_members(serve, 3)
    first, peers = nodes[0], nodes[1:]

    def answered() -> list[float]:
        return [scraped(peer.parts)[1]["kvnode_replica_calls_answered_total", frozenset()] for peer in peers]

    _, before = scraped(first.parts)
    answered_before = answered()
    # 8 PUTs at once, each writing to both peers (with a clock call at most beside them).
    await asyncio.gather(*(first.put(f"key{i}", b"value") for i in range(8)))
    _, after = scraped(first.parts)
    frames, calls = (
        {peer: value - by_peer(before, name)[peer] for peer, value in by_peer(after, name).items()}
        for name in ("kvnode_peer_frames_sent_total", "kvnode_peer_calls_sent_total")
    )
    assert set(calls) == set(frames) == {peer.url for peer in peers}
    assert all(8 <= calls[peer] <= 9 and 1 <= frames[peer] <= calls[peer] for peer in calls), (frames, calls)

    # Every call sent is answered (the ack=2 answer may come before the third replica's).
    def all_answered() -> bool:
        return all(later - earlier >= 8 for later, earlier in zip(answered(), answered_before, strict=True))

    await until(all_answered, "every write answered", turns=1000)
    for peer in peers:
        assert scraped(peer.parts)[1]["kvnode_replica_frames_answered_total", frozenset()] >= 1
