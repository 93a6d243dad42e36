"""The replication factor N as cluster metadata, with real nodes: a cluster of six members on three
machines (loopback addresses) with N = 3 keeps each key on exactly three members, on distinct machines,
the first three of its placement order; ``from`` above N is refused naming it; every view reports N; and a
node restarted with another ``--replication-factor`` keeps the stored one and says so; the client reports
N and routes each key to its owners first."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from kvnode.client import BadRequest, Client
from kvnode.topology.placement import Placement, host_of
from tests.changes import copies, on_machines, status_of
from tests.harness import ClusterFactory, Node, request, wait_for


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
    restarted = Node(dataclasses.replace(member.config, replication_factor=3), tmp_path / "restarted.log")
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
