"""A cluster-wide scan (``GET /v0/scan`` on any node, ``Client.scan``), with real nodes: five members with
N = 3, one of them down: each live key of the range once, with its newest value, in key order, merged from
the members that answered; pages of ``limit`` records resume by their token; /v0/entities stays one node's;
and with N members down (a key may have no owner left) the scan is refused."""

from __future__ import annotations

import pytest

from kvnode.client import Client
from kvnode.node.scan_api import NEXT_PAGE_HEADER
from tests.harness import Cluster, ClusterFactory, read_chunks, request

KEYS = [f"k-{i:03d}" for i in range(120)]
OVERWRITTEN, DELETED = KEYS[:20], KEYS[100:110]


def expected() -> list[tuple[bytes, bytes]]:
    values = {key: b"new-" + key.encode() if key in OVERWRITTEN else key.encode() for key in KEYS}
    return [(key.encode(), values[key]) for key in KEYS if key not in DELETED]


def scan(url: str, **params: str) -> list[tuple[bytes, bytes]]:
    status, chunks = read_chunks(url, "/v0/scan", params)
    assert status == 200, chunks
    return [(key, value) for key, _, value in (chunk.partition(b"\n") for chunk in chunks)]


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> Cluster:
    """Five members, N = 3; every key written, overwritten or deleted on all three of its owners (ack=3), a
    key outside the range, then the fifth member stopped."""
    cluster = start_cluster(5, replication_factor=3)
    for i, key in enumerate(KEYS):
        assert cluster[i % 5].put(key, key.encode(), ack=3).status == 201
    for key in OVERWRITTEN:
        assert cluster[1].put(key, b"new-" + key.encode(), ack=3).status == 201
    for key in DELETED:
        assert cluster[2].delete(key, ack=3).status == 202
    assert cluster[0].put("l-outside", b"v", ack=3).status == 201
    cluster[4].stop()
    return cluster


def test_each_live_key_once_with_its_newest_value_while_a_member_is_down(cluster: Cluster) -> None:
    for node in cluster.running():
        assert scan(node.url, start="k", end="l") == expected(), node.url
    assert len(cluster[0].scan("k", "l")) < len(expected())  # /v0/entities: this node's own keys only


def test_pages_of_a_limit_resume_from_their_token(cluster: Cluster) -> None:
    pages, params = [], {"start": "k", "end": "l", "limit": "7"}
    while True:
        records = scan(cluster[3].url, **params)
        token = request(cluster[3].url, "GET", "/v0/scan", params).headers.get(NEXT_PAGE_HEADER.lower())
        assert len(records) == 7 or token is None
        pages.append(records)
        if token is None:
            break
        params["page"] = token
    assert [record for page in pages for record in page] == expected()
    for bad in ({"limit": "0"}, {"limit": "x"}, {"page": "zz"}, {"page": "6a"}, {"nope": "1"}):
        answer = request(cluster[0].url, "GET", "/v0/scan", {"start": "k", **bad})
        assert answer.status == 400 and answer.text.count("\n") == 1, (bad, answer.text)


async def test_the_client_scans_the_cluster_and_one_node_on_request(cluster: Cluster) -> None:
    async with Client(cluster[0].url) as kv:
        assert [(key.encode(), value) async for key, value in kv.scan("k", "l")] == expected()
        local = [key async for key, _ in kv.scan("k", "l", node=cluster[1].url)]
        assert 0 < len(local) < len(expected())


def test_with_n_members_down_the_scan_is_refused_naming_them(cluster: Cluster) -> None:
    cluster[3].stop()
    cluster[2].stop()
    answer = request(cluster[0].url, "GET", "/v0/scan", {"start": "k"})
    assert answer.status == 503 and "N=3" in answer.text and cluster[2].url in answer.text, answer.text
