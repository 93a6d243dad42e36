"""Joins and leaves that move only what changes hands, with real nodes: in a cluster of six members with
replication factor N = 3, a member joining receives about N/7 of the keys (each once, from a current
owner), and one leaving sends about N/6 of them (each to its next owner only); /metrics and admin report
that figure, and no acknowledged write is lost under a writer during either.

The writer goes on while the change runs, so what moves is bounded, not counted in advance: at least the
keys the member owns (or owned) that were acknowledged before the change began, at most every key it owns
(owned) once the writer stopped: each key once. Both bounds are about N/members of the keys."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tests.changes import SECRET, Writer, assert_readable, local_keys, newcomer, owned_by, until_status
from tests.harness import ClusterFactory, Node, request, run_kvnode, scrape, total, wait_for

KEYS = 700  # the share of each member is then known within a few per cent
QUIET_S = 10**6  # the newcomer's continuous anti-entropy waits that long: only its join moves records


def streamed(node: Node) -> int:
    """What the node counts as streamed by its change, in /metrics and /v0/cluster (the same figure)."""
    view = json.loads(request(node.url, "GET", "/v0/cluster").body)
    assert total(scrape(node), "kvnode_membership_streamed_records_total") == view["streamed"]
    return int(view["streamed"])


def holds_its_keys(node: Node, owned: set[str]) -> None:
    wait_for(lambda: owned <= local_keys(node), what=f"{node.url} to hold every key it owns")


def assert_moved(moved: int, owned: tuple[set[str], set[str]], keys: tuple[int, int], share: float) -> None:
    """Each key owned before the change began moved once, and no more than every key owned by its end;
    and either is about ``share`` of the keys at that time (``keys``: before, at the end)."""
    assert len(owned[0]) <= moved <= len(owned[1]), ([len(part) for part in owned], moved)
    for owned_then, keys_then in zip(owned, keys, strict=True):
        assert abs(len(owned_then) - share * keys_then) <= 0.15 * share * keys_then, (
            len(owned_then),
            keys_then,
        )


def filled(nodes: list[Node]) -> list[str]:
    keys = [f"key-{i}" for i in range(KEYS)]
    for i, key in enumerate(keys):
        assert nodes[i % len(nodes)].put(key, key.encode()).status == 201  # from = N = 3, ack = 2
    return keys


def test_a_join_into_six_members_with_n_3_streams_about_3_in_7_keys(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(6, cluster_secret=SECRET, replication_factor=3)
    keys = filled(cluster.nodes)
    joining = newcomer(cluster, tmp_path)
    new = Node(dataclasses.replace(joining.config, repair_interval_s=QUIET_S), joining.log_path)
    members, nodes = [*cluster.urls, new.url], [*cluster.nodes, new]
    with Writer(cluster[1], "during") as writer:
        wait_for(lambda: len(writer.acknowledged) >= 20, what="writes acknowledged before the join")
        before = keys + writer.acknowledged
        new.start()
        for node in nodes:
            until_status(
                node, lambda status: status["cluster"] == members and not status["joining"], "joined"
            )
        wait_for(lambda: len(writer.acknowledged) >= 60, what="writes acknowledged after it")
    keys += writer.acknowledged
    owned = owned_by(new.url, members, before), owned_by(new.url, members, keys)
    assert_moved(streamed(new), owned, (len(before), len(keys)), 3 / 7)
    holds_its_keys(new, owned[1])
    assert_readable([cluster[0], new], keys)  # the default quorum: from = N = 3, ack = 2


def test_a_leave_from_six_members_with_n_3_streams_about_3_in_6_keys_to_their_next_owners(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(6, cluster_secret=SECRET, replication_factor=3)
    keys = filled(cluster.nodes)
    leaving, remaining = cluster[5], list(cluster.nodes[:5])
    with Writer(cluster[0], "during") as writer:
        wait_for(lambda: len(writer.acknowledged) >= 20, what="writes acknowledged before the leave")
        before = keys + writer.acknowledged
        command = ["admin", "--url", cluster[0].url, "leave", leaving.url, "--wait", "--json"]
        result = run_kvnode(command, tmp_path)
        assert result.returncode == 0, result.stderr
        wait_for(lambda: len(writer.acknowledged) >= 60, what="writes acknowledged after it")
    keys += writer.acknowledged
    sent = json.loads(result.stdout)["streamed"]
    assert sent == streamed(leaving)  # admin's figure is the member's own
    owned = owned_by(leaving.url, cluster.urls, before), owned_by(leaving.url, cluster.urls, keys)
    assert_moved(sent, owned, (len(before), len(keys)), 3 / 6)
    leaving.stop()
    for node in remaining:
        until_status(node, lambda status: leaving.url not in status["cluster"], "without the member")
    urls = [node.url for node in remaining]
    for node in remaining:  # the next owners hold what they gained, with no client reading first
        holds_its_keys(node, owned_by(node.url, urls, keys))
    assert_readable(remaining[:2], keys)
