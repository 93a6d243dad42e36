"""kvnode.healing.summary: the trees, pure; compared with trees built from scratch."""

from __future__ import annotations

import random

from kvnode.healing.summary import SEGMENTS, SegmentTree, Summaries, key_segment
from kvnode.storage.records import Record, encode
from kvnode.topology.placement import Placement

MEMBERS = ["http://a:1", "http://b:1", "http://c:1", "http://d:1"]


def _random_record(rng: random.Random, timestamp: int) -> bytes:
    copies = rng.choice([0, 0, 1, 2, 3])
    if rng.random() < 0.3:
        return encode(Record.delete(timestamp, copies=copies))
    ttl = rng.choice([0, 0, 1000])
    return encode(Record.put(timestamp, rng.randbytes(rng.randrange(20)), ttl_us=ttl, copies=copies))


def _from_scratch(own: str, placement: Placement, held: dict[bytes, bytes]) -> Summaries:
    summaries = Summaries(own, placement)
    for key, record in held.items():
        summaries.changed(key, None, record)
    return summaries


def test_deltas_match_a_tree_built_from_scratch() -> None:
    placement = Placement(MEMBERS)
    for seed in range(20):
        rng = random.Random(seed)
        kept = Summaries(MEMBERS[0], placement)
        held: dict[bytes, bytes] = {}
        for timestamp in range(1, 400):
            key = b"k%d" % rng.randrange(60)
            new = None if rng.random() < 0.1 else _random_record(rng, timestamp)  # None: dropped (GC)
            kept.changed(key, held.get(key), new)
            if new is None:
                held.pop(key, None)
            else:
                held[key] = new
        scratch = _from_scratch(MEMBERS[0], placement, held)
        for peer in kept.peers:
            assert kept.tree_for(peer) == scratch.tree_for(peer), (seed, peer)


def test_replicas_agree_exactly_when_they_hold_the_same_versions() -> None:
    placement = Placement(MEMBERS)
    rng = random.Random(7)
    records = {b"k%d" % i: _random_record(rng, i + 1) for i in range(200)}
    trees = {url: _from_scratch(url, placement, records) for url in MEMBERS}
    # Every member holding every version: each pair's trees for each other are equal.
    for a in MEMBERS:
        for b in MEMBERS:
            if a != b:
                assert trees[a].tree_for(b) == trees[b].tree_for(a)
    # One version newer on a only: a and b disagree in exactly that key's segment, when both hold it.
    key = next(k for k, r in records.items() if trees["http://a:1"].shares(k, r, "http://b:1"))
    trees["http://a:1"].changed(key, records[key], encode(Record.put(10_000, b"new")))
    ours, theirs = trees["http://a:1"].tree_for("http://b:1"), trees["http://b:1"].tree_for("http://a:1")
    branches = ours.differing_branches(theirs.branches)
    assert ours.differing_segments(branches, theirs.segment_hashes(branches)) == [key_segment(key)]


def test_a_version_on_fewer_members_is_only_in_the_trees_of_its_replicas() -> None:
    placement = Placement(MEMBERS)
    key = b"user:1"
    first, second, third = placement.replicas_for(key, 3)
    record = encode(Record.put(1, b"v", copies=2))
    summaries = Summaries(first, placement)
    summaries.changed(key, None, record)
    assert summaries.shares(key, record, second)
    assert not summaries.shares(key, record, third)
    assert summaries.tree_for(second) != SegmentTree()
    assert summaries.tree_for(third) == SegmentTree()
    outsider = Summaries(third, placement)  # holds a copy it should not: no tree of its shows it
    outsider.changed(key, None, record)
    assert all(outsider.tree_for(peer) == SegmentTree() for peer in outsider.peers)


def test_a_tree_survives_its_bytes() -> None:
    tree = SegmentTree()
    for segment in range(0, SEGMENTS, 7):
        tree.toggle(segment, segment * 2654435761)
    again = SegmentTree.from_bytes(tree.to_bytes())
    assert again == tree
    assert list(again.branches) == list(tree.branches)
