"""A rolling upgrade, on real nodes: a cluster of three with one node pinned to the previous replica
protocol (``--max-protocol 1``, as a node not yet upgraded speaks) serves reads, writes and deletes with
every fan-out mode, whichever node coordinates; hints, read repair and anti-entropy reach across it; each
node says which version it speaks with each peer (1 with the pinned one, the newest between the others);
restarted unpinned, the node's channels move to the newest."""

from __future__ import annotations

import dataclasses
import json
import operator
import time
from functools import partial
from pathlib import Path

import pytest

from kvnode.config import FanoutMode
from kvnode.replica.channel.protocol import CURRENT_VERSION
from tests.harness import (
    CONVERGE_S,
    FANOUTS,
    Cluster,
    ClusterFactory,
    Node,
    fresh_key,
    key_where,
    listed_on,
    poll,
    request,
    run_kvnode,
    scrape,
    stats,
    total,
)

SECRET = "the-rolling-upgrade-secret-" * 2


def restarted(node: Node, log_path: Path, max_protocol: int) -> Node:
    """``node`` stopped and started again on its data dir, speaking versions up to ``max_protocol``."""
    node.stop()
    again = Node(dataclasses.replace(node.config, max_protocol=max_protocol), log_path)
    again.start()
    return again


def versions_seen(node: Node) -> dict[str, int]:
    """The version ``node`` speaks with each peer, as ``admin status`` reads it (/v0/cluster, which
    connects to a peer not connected first)."""
    response = request(node.url, "GET", "/v0/cluster")
    assert response.status == 200, response.text
    return {member["url"]: member["protocol"] for member in json.loads(response.body)["members"]}


def wait_for_versions(nodes: list[Node], expected: dict[tuple[str, str], int]) -> None:
    """Until every node shows the version ``expected`` says for each (node, peer)."""

    def seen() -> dict[tuple[str, str], int]:
        return {
            (node.url, peer): version
            for node in nodes
            for peer, version in versions_seen(node).items()
            if peer != node.url
        }

    poll(seen, lambda now: now == expected, CONVERGE_S, "each channel's protocol version")


def pinned_cluster(start_cluster: ClusterFactory, tmp_path: Path, **options: object) -> tuple[Cluster, Node]:
    """A cluster of three with a secret (each channel's versions are proven, kvnode.replica.channel.handshake)
    whose third node runs pinned to version 1; every channel open and agreed."""
    cluster = start_cluster(3, cluster_secret=SECRET, **options)
    pinned = restarted(cluster[2], tmp_path / "pinned.log", max_protocol=1)
    first, second = cluster[0], cluster[1]
    wait_for_versions(
        [first, second, pinned],
        {
            (first.url, second.url): CURRENT_VERSION, (second.url, first.url): CURRENT_VERSION,
            (first.url, pinned.url): 1, (second.url, pinned.url): 1,
            (pinned.url, first.url): 1, (pinned.url, second.url): 1,
        },
    )  # fmt: skip
    return cluster, pinned


def no_call_refused(nodes: list[Node]) -> None:
    """No node dropped a channel for a call its version lacks (a DELETE sent on a version 1 channel)."""
    for node in nodes:
        log = node.log_path.read_text(errors="replace")
        assert "unknown op" not in log, node.url


@pytest.mark.parametrize("fanout", FANOUTS)
def test_reads_writes_deletes_and_read_repair_work_beside_a_node_pinned_to_version_1(
    start_cluster: ClusterFactory, tmp_path: Path, fanout: FanoutMode
) -> None:
    cluster, pinned = pinned_cluster(start_cluster, tmp_path, fanout=fanout)
    nodes = [cluster[0], cluster[1], pinned]
    for coordinator in nodes:  # the pinned one coordinates over version 1 channels, the others over both
        key = fresh_key(f"rolling-{fanout}")
        assert coordinator.put(key, b"v1", ack=3).status == 201
        assert [node.get(key, ack=3).body for node in nodes] == [b"v1"] * 3
        assert coordinator.delete(key, ack=3).status == 202
        assert [node.get(key, ack=3).status for node in nodes] == [404] * 3
        assert [listed_on(node, key) for node in nodes] == [None] * 3  # the tombstone on every replica
    # Read repair across versions: a key whose third replica is the pinned node, left stale by a from=2
    # write (or delete), is repaired by a read that reaches it (sync and speculative reads ask only ack).
    ack = 2 if fanout == "async" else 3
    for deleting, expected in ((False, b"new"), (True, None)):
        key = key_where(cluster.urls, "stale-pinned", lambda order: order[2] == pinned.url)
        assert cluster[0].put(key, b"old", ack=3, from_=3).status == 201
        if deleting:
            assert cluster[0].delete(key, ack=2, from_=2).status == 202
        else:
            assert cluster[0].put(key, b"new", ack=2, from_=2).status == 201
        assert listed_on(pinned, key) == b"old"
        assert cluster[1].get(key, ack=ack, from_=3).status == (404 if deleting else 200)
        poll(partial(listed_on, pinned, key), partial(operator.eq, expected), what="read repair")
    no_call_refused(nodes)


def seen_gone(node: Node, by: Node) -> None:
    """Until ``by`` has seen its channel to the stopped ``node`` close."""
    poll(lambda: stats(by)["peers"][node.url], lambda state: state != "connected", what="seen gone")


def test_hints_reach_a_node_pinned_to_version_1(start_cluster: ClusterFactory, tmp_path: Path) -> None:
    """Writes and deletes it missed while down, hinted and delivered by a coordinator that speaks the newest
    version with the other peer and 1 with it."""
    cluster, pinned = pinned_cluster(start_cluster, tmp_path)
    first = cluster[0]
    doomed = fresh_key("hinted-delete")
    assert first.put(doomed, b"doomed", ack=3).status == 201
    pinned.stop()
    seen_gone(pinned, first)
    hinted = fresh_key("hinted-put")
    assert first.put(hinted, b"missed", ack=2).status == 201
    assert first.delete(doomed, ack=2).status == 202
    assert stats(first)["hints"]["pending"] == {pinned.url: 2}
    pinned.start()
    poll(lambda: stats(first)["hints"]["pending"], lambda pending: pending == {}, what="hints delivered")
    assert (listed_on(pinned, hinted), listed_on(pinned, doomed)) == (b"missed", None)
    assert stats(first)["hints"]["delivered"] == {pinned.url: 2}
    no_call_refused([first, cluster[1], pinned])


def test_anti_entropy_reaches_a_pinned_node_and_unpinned_it_speaks_the_newest(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    """Writes it missed beyond the hint window (no hint kept), brought by a repair it runs with both
    peers over version 1 channels; then the upgrade: restarted unpinned, every channel speaks the newest."""
    cluster, pinned = pinned_cluster(start_cluster, tmp_path, hint_window_s=1)
    first, second = cluster[0], cluster[1]
    deleted = fresh_key("repaired-delete")
    assert first.put(deleted, b"doomed", ack=3).status == 201
    pinned.stop()
    seen_gone(pinned, first)
    seen_gone(pinned, second)
    time.sleep(1.2)  # the subject: down longer than the hint window
    missed = {fresh_key("missed"): b"v%d" % index for index in range(20)}
    for index, (key, value) in enumerate(missed.items()):
        assert (first if index % 2 else second).put(key, value, ack=2).status == 201
    assert first.delete(deleted, ack=2).status == 202
    assert stats(first)["hints"]["pending"] == {} == stats(second)["hints"]["pending"]
    pinned.start()
    assert [listed_on(pinned, key) for key in missed] == [None] * len(missed)
    result = run_kvnode(["admin", "--url", pinned.url, "repair", "--wait", "--json"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert [listed_on(pinned, key) for key in missed] == list(missed.values())
    assert listed_on(pinned, deleted) is None
    no_call_refused([first, second, pinned])
    upgraded = restarted(pinned, tmp_path / "upgraded.log", max_protocol=0)
    nodes = [first, second, upgraded]
    wait_for_versions(nodes, {(a.url, b.url): CURRENT_VERSION for a in nodes for b in nodes if a is not b})
    newest = {first.url: CURRENT_VERSION, second.url: CURRENT_VERSION}
    assert stats(upgraded)["protocol"] == {"speaks": f"1-{CURRENT_VERSION}", "peers": newest}
    assert total(scrape(first), "kvnode_peer_protocol_version", peer=upgraded.url) == CURRENT_VERSION
