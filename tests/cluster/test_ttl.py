"""TTL (PUT ?ttl=MS) on real node processes: a value reads as present until its expiry and as absent after
it through every node and quorum, is left out of every node's scan, hides older values once expired,
loses to later writes; the expiry is the write's timestamp plus the TTL, the same instant on every node
whatever its clock's offset; and a bad ttl is a 400 that writes nothing.

Reads "before expiry" are judged honestly on a busy machine: a read that ends after the TTL has run out
since the PUT was sent proves nothing and is not asserted (nodes without an offset judge with the wall
clock, and the write is stamped after it was sent, so a read that ends earlier must see the value)."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator

from tests.harness import (
    CONVERGE_S,
    Cluster,
    ClusterFactory,
    Node,
    fresh_key,
    key_where,
    miss_while_restored,
    request,
    wait_for,
)

QUORUMS = [(1, 1), (1, 2), (2, 2), (1, 3), (2, 3), (3, 3)]  # (ack, from) over 3 nodes
MAX_TTL_MS = 20 * 365 * 24 * 3600 * 1000  # the API's bound: 20 years


def put_with_ttl(node: Node, key: str, value: bytes, ttl_ms: int) -> float:
    """PUT to every replica (ack=3) with a TTL; the wall-clock time it was sent, from which the TTL runs
    out at the earliest for nodes without a clock offset."""
    sent = time.time()
    response = request(node.url, "PUT", "/v0/entity", {"id": key, "ack": 3, "ttl": ttl_ms}, body=value)
    assert response.status == 201, response.text
    return sent


def reads(cluster: Cluster, key: str) -> Iterator[tuple[Node, int, int, int]]:
    """(node, ack, from, status) of a GET of key through every node with every quorum."""
    for node in cluster:
        for ack, from_ in QUORUMS:
            yield node, ack, from_, node.get(key, ack=ack, from_=from_).status


def listed(node: Node, key: str) -> bool:
    return key.encode() in dict(node.scan(key, key + "\x00"))


def expired_everywhere(cluster: Cluster, key: str) -> None:
    """Once one node reads key as expired, every node and quorum does, and no node's scan lists it."""
    wait_for(lambda: cluster[0].get(key).status == 404, CONVERGE_S, f"{key} to expire")
    assert [(node.url, ack, from_) for node, ack, from_, status in reads(cluster, key) if status != 404] == []
    assert [node.url for node in cluster if listed(node, key)] == []


def test_a_value_reads_until_its_ttl_runs_out_and_is_absent_after_through_every_node(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    key, ttl_ms = fresh_key("ttl"), 2000
    sent = put_with_ttl(cluster[0], key, b"short-lived", ttl_ms)
    checked = 0
    for node, ack, from_, status in reads(cluster, key):
        if time.time() < sent + ttl_ms / 1000:
            assert status == 200, (node.url, ack, from_)
            checked += 1
    scans = [listed(node, key) for node in cluster]
    if time.time() < sent + ttl_ms / 1000:
        assert scans == [True] * 3
    assert checked, "the machine was too slow to read before the TTL ran out"
    expired_everywhere(cluster, key)


def test_a_later_put_without_ttl_makes_the_key_permanent(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    key, sentinel = fresh_key("permanent"), fresh_key("sentinel")
    put_with_ttl(cluster[0], key, b"temporary", 1000)
    assert cluster[1].put(key, b"permanent", ack=3).status == 201
    # The sentinel is stamped after the first PUT with the same TTL: once it has expired, so has that TTL.
    put_with_ttl(cluster[2], sentinel, b"", 1000)
    expired_everywhere(cluster, sentinel)
    for node, ack, from_, status in reads(cluster, key):
        assert status == 200, (node.url, ack, from_)
    assert {node.get(key).body for node in cluster} == {b"permanent"}
    assert [listed(node, key) for node in cluster] == [True] * 3


def test_an_expired_value_hides_the_older_permanent_one_and_read_repair_spreads_it(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    stale = cluster[2]
    key = key_where(cluster.urls, "hidden", lambda order: order[0] == stale.url)
    assert cluster[0].put(key, b"old", ack=3).status == 201
    # The stale node keeps only "old": it missed the TTL write (restored from a copy taken before).
    miss_while_restored(stale, lambda: put_with_ttl(cluster[0], key, b"new", 1000) > 0)
    assert cluster[0].get(key, ack=1, from_=1).body == b"old"  # from=1 asks the stale first replica only
    wait_for(lambda: cluster[0].get(key, ack=3).status == 404, CONVERGE_S, "the TTL write to expire")
    # That read found the stale replica and repaired it with the expired version, which hides "old" there.
    wait_for(lambda: cluster[1].get(key, ack=1, from_=1).status == 404, CONVERGE_S, "read repair")
    expired_everywhere(cluster, key)


def test_a_delete_after_a_ttl_write_wins(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    key = fresh_key("deleted")
    put_with_ttl(cluster[0], key, b"v", 60_000)  # far from expiring while the test runs
    assert cluster[1].delete(key, ack=3).status == 202
    assert [(node.url, ack, from_) for node, ack, from_, status in reads(cluster, key) if status != 404] == []
    assert [node.url for node in cluster if listed(node, key)] == []


def test_expiry_is_the_write_timestamp_plus_the_ttl_on_every_node_whatever_its_clock(
    start_cluster: ClusterFactory,
) -> None:
    """Node C's clock runs 2.5 s ahead (within the 5 s maximum skew). A record's expiry is one instant of
    cluster time, so C, whose clock reaches it first, sees it expire first, by its lead, and never later
    than the others; a node behind the writer sees it expire later, by its lag."""
    lead_s = 2.5
    cluster = start_cluster(3, clock_offsets_ms=(0, 0, int(lead_s * 1000)))
    a, c = cluster[0], cluster[2]

    # Stamped by A: C's clock is already past the expiry, so C reads it as absent at once. (Were the TTL
    # counted from when each replica received the write, C would read it for a second, as A does.)
    key, ttl_s = fresh_key("skew-a"), 1.0
    sent = put_with_ttl(a, key, b"v", int(ttl_s * 1000))
    assert c.get(key, ack=3).status == 404
    assert not listed(c, key)
    status = a.get(key, ack=3).status
    if time.time() < sent + ttl_s:  # judged before this moment
        assert status == 200
    expired_everywhere(cluster, key)  # A first, then every node: C never later than A

    # Stamped by C, 2.5 s ahead: A, behind, reads it for about 2.5 s longer in real time than C does.
    key = fresh_key("skew-c")
    sent = put_with_ttl(c, key, b"v", int(ttl_s * 1000))
    wait_for(lambda: c.get(key).status == 404, CONVERGE_S, "C to see the record expire")
    status = a.get(key).status
    if time.time() < sent + lead_s + ttl_s:
        assert status == 200
    wait_for(lambda: a.get(key).status == 404, CONVERGE_S, "A to see the record expire")
    assert c.get(key).status == 404


def test_a_bad_ttl_is_400_with_one_line_and_writes_nothing(node: Node) -> None:
    key = fresh_key("bad-ttl")
    bad = [
        "",
        "0",
        "-5",
        "+5",
        " 5",
        "5 ",
        "5.0",
        "1e3",
        "1_000",
        "abc",
        "\u0663",
        str(MAX_TTL_MS + 1),
        "9" * 40,
    ]
    for ttl in bad:
        query = f"id={urllib.parse.quote(key)}&ttl={urllib.parse.quote(ttl)}"
        response = request(node.url, "PUT", f"/v0/entity?{query}", body=b"v")
        assert response.status == 400, (ttl, response.status)
        assert response.text.count("\n") == 1 and "'ttl'" in response.text, response.text
    twice = request(node.url, "PUT", f"/v0/entity?id={urllib.parse.quote(key)}&ttl=5&ttl=6", body=b"v")
    assert twice.status == 400 and "'ttl'" in twice.text
    assert node.get(key).status == 404  # none of them wrote

    assert node.put(key, b"kept").status == 201
    for method, takes in (("GET", "'id', 'ack', 'from', 'serial'"), ("DELETE", "'id', 'ack', 'from'")):
        response = request(node.url, method, "/v0/entity", {"id": key, "ttl": 1000})
        assert response.status == 400, (method, response.status)
        assert response.text == f"unknown query parameter 'ttl': {method} /v0/entity takes {takes}\n"
    assert node.get(key).body == b"kept"  # the DELETE with a ttl deleted nothing

    longest = request(node.url, "PUT", "/v0/entity", {"id": key, "ttl": MAX_TTL_MS}, body=b"long")
    assert longest.status == 201, longest.text
    assert node.get(key).body == b"long"
