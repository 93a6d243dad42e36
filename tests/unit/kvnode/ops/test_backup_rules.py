"""kvnode.ops.backup_rules: the merge keeps each key's newest version and reads the streams lazily; the
restore rule writes outright only what cannot bring a deleted key back; a manifest is checked."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from kvnode.ops.backup_rules import (
    FORMAT,
    BadBackup,
    Counts,
    OutOfOrder,
    RestoreRule,
    Way,
    check_manifest,
    merge_newest,
)
from kvnode.storage.records import Record, decode, encode


def stream(*versions: tuple[str, Record]) -> list[tuple[bytes, bytes]]:
    return [(key.encode(), encode(record)) for key, record in versions]


def merged(*streams: list[tuple[bytes, bytes]]) -> list[tuple[str, Record]]:
    return [(key.decode(), decode(raw)) for key, raw in merge_newest(streams)]


def test_the_merge_keeps_each_key_once_with_its_newest_version_in_key_order() -> None:
    a = stream(("a", Record.put(5, b"a5")), ("c", Record.put(1, b"c1")), ("d", Record.put(9, b"d9")))
    b = stream(("a", Record.put(7, b"a7")), ("b", Record.delete(3)), ("d", Record.delete(9)))
    c = stream(("c", Record.put(1, b"c1-greater")), ("e", Record.put(2, b"e2", copies=2)))
    assert merged(a, b, c, []) == [
        ("a", Record.put(7, b"a7")),
        ("b", Record.delete(3)),
        ("c", Record.put(1, b"c1-greater")),  # a tie: the greater bytes win, as on every replica
        ("d", Record.delete(9)),  # a tie: the tombstone wins
        ("e", Record.put(2, b"e2", copies=2)),
    ]
    assert merged() == []


def test_the_merge_reads_each_stream_only_as_far_as_it_needs() -> None:
    read = [0, 0]

    def endless(index: int) -> Iterator[tuple[bytes, bytes]]:
        for number in itertools.count():
            read[index] += 1
            yield b"%08d-%d" % (number, index), encode(Record.put(number, b"v"))

    first = list(itertools.islice(merge_newest([endless(0), endless(1)]), 10))
    assert [key[:8] for key, _ in first] == [b"%08d" % (n // 2) for n in range(10)]
    assert max(read) <= 7  # one item ahead of what was merged, per stream


def test_a_stream_out_of_key_order_is_refused() -> None:
    backwards = stream(("b", Record.put(1, b"v")), ("a", Record.put(1, b"v")))
    with pytest.raises(OutOfOrder, match="key b'a' came after b'b'"):
        merged(backwards)


GRACE = 1_000
NOW = 1_000_000


@pytest.mark.parametrize(
    ("same_cluster", "authoritative", "age", "way"),
    [
        (False, False, 10 * GRACE, Way.NEW_CLUSTER),  # a cluster that never held these keys
        (True, False, GRACE - 1, Way.YOUNG),  # a later tombstone is still kept
        (True, True, GRACE - 1, Way.YOUNG),
        (True, False, GRACE, Way.IF_HELD),  # a later tombstone may be gone: only where the key is held
        (True, True, GRACE, Way.AUTHORITATIVE),
    ],
)
def test_the_restore_rule_writes_outright_only_what_cannot_bring_a_deleted_key_back(
    same_cluster: bool, authoritative: bool, age: int, way: Way
) -> None:
    rule = RestoreRule(same_cluster=same_cluster, grace_us=GRACE, authoritative=authoritative)
    assert rule.way(Record.put(NOW - age, b"v"), now_us=NOW) is way
    assert rule.way(Record.delete(NOW - age), now_us=NOW) is way


def test_counts_tell_values_tombstones_and_expired_versions_apart() -> None:
    counts = Counts()
    for record in (Record.put(5, b"v"), Record.put(6, b"v", ttl_us=10), Record.put(9, b"v", ttl_us=10)):
        counts.add(record, now_us=16)
    counts.add(Record.delete(7), now_us=16)
    assert counts.to_json() == {"keys": 4, "values": 2, "tombstones": 1, "expired": 1}
    assert counts.newest_timestamp_us == 9


MANIFEST: dict[str, Any] = {
    "format": FORMAT,
    "cluster_id": "c0ffee",
    "members": ["http://a:1"],
    "replication_factor": None,
    "newest_timestamp_us": 5,
    "taken_at": "2026-11-27T12:00:00Z",
    "counts": {"keys": 1, "values": 1, "tombstones": 0, "expired": 0},
    "versions_bytes": 30,
    "versions_sha256": "00" * 32,
}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"format": FORMAT + 1}, f"format {FORMAT + 1}; this kvnode restores format {FORMAT}"),
        ({"versions_sha256": None}, "no 'versions_sha256' of type str"),
        ({"counts": {"keys": 1}}, "counts lack one of keys, values, tombstones, expired"),
    ],
)
def test_a_manifest_this_kvnode_cannot_restore_is_refused_saying_why(
    change: dict[str, Any], reason: str
) -> None:
    assert check_manifest(MANIFEST) == MANIFEST
    with pytest.raises(BadBackup, match=reason):
        check_manifest({**MANIFEST, **change})
    with pytest.raises(BadBackup, match="not a JSON object"):
        check_manifest([MANIFEST])
