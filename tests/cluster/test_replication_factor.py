"""The replication factor N as cluster metadata, with real nodes: a cluster of six members on three
machines (loopback addresses) with N = 3 keeps each key on exactly three members, on distinct machines,
the first three of its placement order; ``from`` above N is refused naming it; every view reports N; and a
node restarted with another ``--replication-factor`` keeps the stored one and says so; the client reports
N and routes each key to its owners first; ``admin replication-factor N --wait`` changes N under a writer
(3 to 2 and back) without losing an acknowledged write, each key on exactly its N owners after each (the
surplus dropped after the grace period), and refuses a bad N or a second change in one line; a claimant
killed once it streamed makes the new N count when it is started again."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from kvnode.client import BadRequest, Client
from kvnode.config import ReplicationFactor
from kvnode.topology.placement import Placement, host_of
from tests.changes import (
    SECRET,
    Writer,
    copies,
    on_machines,
    restarted_to_crash,
    status_of,
    until_status,
)
from tests.harness import Cluster, ClusterFactory, Node, request, run_kvnode, wait_for


def test_six_members_on_three_machines_keep_each_key_on_three_of_them_on_distinct_machines(
    tmp_path: Path,
) -> None:
    cluster = on_machines(tmp_path, machines=3, per_machine=2, replication=3)
    keys = [f"key-{i}" for i in range(60)]
    for i, key in enumerate(keys):
        assert cluster[i % 6].put(key, key.encode()).status == 201  # from = N = 3, ack = 2
    # A write's third copy may still be on its way once two acknowledged it: wait for all three.
    wait_for(lambda: all(len(nodes) >= 3 for nodes in copies(cluster.nodes, keys).values()), what="3 copies")
    placement = Placement(cluster.urls, replication=3)
    holders_of = copies(cluster.nodes, keys)
    for key, holders in holders_of.items():
        assert sorted(holders) == sorted(placement.owners(key.encode())), key  # exactly its N owners
        assert len({host_of(url) for url in holders}) == 3, f"{key}: two copies on one machine: {holders}"
    # Each member holds about N/members of the keys, not all of them.
    held = Counter(url for holders in holders_of.values() for url in holders)
    assert sum(held.values()) == 3 * len(keys) and max(held.values()) < len(keys), held


def test_from_above_n_is_refused_naming_n_and_every_view_reports_n(tmp_path: Path) -> None:
    cluster = on_machines(tmp_path, machines=3, per_machine=2, replication=3)
    refused = cluster[0].put("too-many", b"v", from_=4)
    assert refused.status == 400 and "replication factor N=3" in refused.text, refused.text
    assert cluster[1].get("too-many", ack=1, from_=3).status == 404  # nothing of it was written
    assert cluster[0].get("too-many").status == 404  # the default from is N: a quorum of 2 of 3
    assert status_of(cluster[3])["replication_factor"] == 3
    view = json.loads(request(cluster[2].url, "GET", "/v0/cluster").body)
    assert (view["replication_factor"], len(view["cluster"])) == (3, 6)


def test_a_node_restarted_with_another_replication_factor_keeps_the_stored_one_and_says_so(
    tmp_path: Path,
) -> None:
    cluster = on_machines(tmp_path, machines=3, per_machine=1, replication=2)
    member = cluster[2]
    member.stop()
    restarted = Node(
        dataclasses.replace(member.config, replication_factor=ReplicationFactor(3)),
        tmp_path / "restarted.log",
    )
    restarted.start()
    lines = [line for line in restarted.log_path.read_text().splitlines() if "--replication-factor" in line]
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "--replication-factor 3 differs from the stored replication factor 2, which this node keeps"
    )
    assert status_of(restarted)["replication_factor"] == 2
    assert restarted.put("k", b"v", from_=3).status == 400  # N is still 2
    assert restarted.put("k", b"v").status == 201
    wait_for(lambda: len(copies([*cluster.nodes[:2], restarted], ["k"])["k"]) == 2, what="2 copies of k")


async def test_the_client_reports_n_and_routes_a_key_to_its_owners_first(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, replication_factor=2)
    async with Client(cluster[0].url) as kv:
        assert kv.replication_factor == 2
        placement = Placement(cluster.urls, replication=2)
        for key in ("a", "b", "user:42"):
            assert kv.route(key)[:2] == placement.owners(key.encode())
        await kv.put("a", b"v")  # from = N = 2
        with pytest.raises(BadRequest, match="replication factor N=2"):
            await kv.put("a", b"v", from_=3)


def admin_resize(cluster: Cluster, n: int, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    """``admin replication-factor N`` asked of a member that is not the claimant (it offers it first)."""
    result = run_kvnode(["admin", "--url", cluster[1].url, "replication-factor", str(n), *extra], tmp_path)
    return result.returncode, result.stdout, result.stderr


def on_exactly_their_owners(cluster: Cluster, keys: list[str], n: int) -> None:
    """Wait until each key is held by exactly its N owners (a surplus copy goes after the grace period)."""
    placement = Placement(cluster.urls, replication=n)

    def exact() -> bool:
        holders = copies(cluster.nodes, keys)
        return all(sorted(holders[key]) == sorted(placement.owners(key.encode())) for key in keys)

    wait_for(exact, seconds=60, what=f"each key on exactly its {n} owners")


def more_than(writer: Writer, count: int) -> bool:
    return len(writer.acknowledged) >= count


def readable(cluster: Cluster, keys: list[str], n: int) -> None:
    for node in cluster:
        unread = [key for key in keys if node.get(key, ack=n, from_=n).body != key.encode()]
        assert not unread, f"{len(unread)} acknowledged keys do not read through {node.url}: {unread[:5]}"


@pytest.mark.slow
def test_the_replication_factor_changes_online_under_writes_without_losing_an_acknowledged_one(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(4, cluster_secret=SECRET, replication_factor=3, gc_grace_s=2, hint_window_s=1)
    acknowledged = [f"key-{i}" for i in range(200)]
    for i, key in enumerate(acknowledged):
        assert cluster[i % 4].put(key, key.encode()).status == 201  # from = N = 3, ack = 2
    for n, label, version in ((2, "down", 3), (3, "up", 5)):
        with Writer(cluster[0], label) as writer:
            wait_for(lambda: len(writer.acknowledged) >= 50, what="writes acknowledged before the change")
            status, out, err = admin_resize(cluster, n, tmp_path, "--wait")
            assert status == 0, err
            assert out.startswith(f"replication factor {n} (membership version {version}, "), out
            wait_for(partial(more_than, writer, len(writer.acknowledged) + 50), what="writes after it")
        acknowledged += writer.acknowledged
        assert {status_of(node)["replication_factor"] for node in cluster} == {n}
        readable(cluster, acknowledged, n)
        on_exactly_their_owners(cluster, acknowledged, n)


def test_a_bad_replication_factor_or_a_second_change_is_refused_in_one_line_and_status_shows_it(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    # A change is under way for at least twice the replica timeout (writes started before it drain): 10 s.
    cluster = start_cluster(4, cluster_secret=SECRET, replication_factor=3, timeout_ms=5_000)
    for n, reason in (
        (0, "a replication factor is from 1 to the 4 members, not 0"),
        (5, "a replication factor is from 1 to the 4 members, not 5"),
        (-1, "a replication factor is from 1 to the 4 members, not -1"),
        (3, "the replication factor is 3 already"),
    ):
        status, _, err = admin_resize(cluster, n, tmp_path)
        assert status == 1 and err.count("\n") == 1 and reason in err, err
    refused = request(cluster[0].url, "POST", "/v0/replication-factor?n=two")
    assert (refused.status, refused.body) == (400, b"query parameter 'n' must be a whole number, not 'two'\n")
    status, out, err = admin_resize(cluster, 2, tmp_path)
    assert status == 0 and "replication factor moving to 2" in out, err
    status, _, err = admin_resize(cluster, 4, tmp_path)
    assert status == 1 and err.count("\n") == 1, err
    assert "a change is under way: the replication factor moves from 3 to 2; one change at a time" in err
    shown = run_kvnode(["admin", "--url", cluster[2].url, "status"], tmp_path).stdout
    assert "membership version 2: the replication factor moves from 3 to 2 (" in shown, shown


def test_the_claimant_killed_once_it_streamed_makes_the_factor_count_when_started_again(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(4, cluster_secret=SECRET, replication_factor=2)
    keys = [f"key-{i}" for i in range(200)]
    for i, key in enumerate(keys):
        assert cluster[i % 4].put(key, key.encode()).status == 201  # from = N = 2, ack = 2
    claimant = cluster[0]  # the first member in the cluster's order streams the new copies
    doomed = restarted_to_crash(claimant, "resize:streamed")
    status, _, err = admin_resize(cluster, 3, tmp_path)
    assert status == 0, err
    assert doomed.process is not None and doomed.process.wait(60) == 137  # it streamed, and died
    assert status_of(cluster[1])["next_replication_factor"] == 3  # N = 3 does not count yet
    claimant.start()  # it stored the change: it streams again, then makes N = 3 count
    for node in cluster:
        until_status(node, lambda status: status["replication_factor"] == 3, "N = 3")
    readable(cluster, keys, 3)
    on_exactly_their_owners(cluster, keys, 3)
