"""``admin cleanup`` with real nodes: after a join into a cluster of N = 3, ``admin status`` shows the
surplus copies the members it displaced hold; ``admin cleanup --wait`` drops them on every member at
once (the default grace period is ten days), so that every live key is on exactly its owners and still
reads, while a surplus tombstone, within its grace period, is kept."""

from __future__ import annotations

import json
from pathlib import Path

from kvnode.topology.placement import Placement
from tests.changes import SECRET, assert_readable, fill, local_keys, newcomer, owned_by, settled
from tests.harness import ClusterFactory, Node, run_kvnode, wait_for
from tests.healing import versions_of


def admin(node: Node, *args: str, cwd: Path) -> tuple[int, str, str]:
    done = run_kvnode(["admin", "--url", node.url, *args], cwd)
    return done.returncode, done.stdout, done.stderr


def surplus_shown(node: Node, cwd: Path) -> dict[str, int | None]:
    """Each member's surplus copies, as ``admin status --json`` through ``node`` shows them."""
    code, shown, said = admin(node, "status", "--json", cwd=cwd)
    assert code == 0, said
    return {member["url"]: member["surplus"] for member in json.loads(shown)["members"]}


def test_cleanup_after_a_join_leaves_each_key_on_its_owners_and_keeps_tombstones_in_their_grace(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    everywhere, two = fill(cluster)
    deleted, live = everywhere[:20], everywhere[20:]
    for key in deleted:
        assert cluster[0].delete(key, ack=3).status == 202
    new = newcomer(cluster, tmp_path)
    new.start()
    nodes, members = [*cluster.nodes, new], [*cluster.urls, new.url]
    settled(nodes, members)
    owned = {node.url: owned_by(node.url, members, live, two) for node in nodes}
    held = {node.url: local_keys(node) for node in cluster.nodes}
    surplus_live = {url: len(held[url] - owned[url]) for url in cluster.urls}
    assert sum(surplus_live.values()) > 0, "the join displaced no owner (the test needs some)"
    after = Placement(members, replication=3)
    displaced = {  # each member's surplus tombstones: deleted keys it held and no longer owns
        url: {key for key in deleted if url not in after.owners(key.encode())} for url in cluster.urls
    }
    # A pass runs once the join settled: each member counts what it holds and no longer owns.
    expected = {url: surplus_live[url] + len(displaced[url]) for url in cluster.urls} | {new.url: 0}
    wait_for(lambda: surplus_shown(cluster[0], tmp_path) == expected, what="every member's surplus counted")
    code, table, said = admin(cluster[0], "status", cwd=tmp_path)
    assert code == 0 and table.splitlines()[1].split()[-1] == "SURPLUS", said
    assert f"surplus: {sum(expected.values())} copies of keys their holder no longer owns" in table

    code, summary, progress = admin(cluster[0], "cleanup", "--wait", cwd=tmp_path)
    assert code == 0, progress
    assert summary.splitlines()[-1].startswith(
        f"cleanup completed on 4 of 4 members: {sum(surplus_live.values())} surplus copies dropped ("
    ), summary

    for node in nodes:
        assert local_keys(node) == owned[node.url], f"{node.url} holds other keys than its own"
    assert_readable(nodes, live, two)
    for key in deleted:
        assert cluster[1].get(key, ack=3).status == 404
    for node in cluster.nodes:  # a surplus tombstone is kept for its grace period, and counted as surplus
        held_tombstones = {key for key, version in versions_of(node).items() if version.tombstone}
        assert displaced[node.url] <= held_tombstones
    remaining = {url: len(displaced[url]) for url in cluster.urls} | {new.url: 0}
    wait_for(lambda: surplus_shown(cluster[0], tmp_path) == remaining, what="the surplus left: tombstones")
