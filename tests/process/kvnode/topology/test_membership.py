"""kvnode.topology.membership: the cluster's identity and membership as stored data, pure; and with real
nodes, the
stored membership ruling over a stale --cluster."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvnode.ops.ports import free_ports
from kvnode.ops.processes import NodeStartError
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership
from tests.harness import ClusterFactory, Node, fresh_key, scrape, total

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"


def test_a_member_restarted_with_a_stale_cluster_flag_keeps_the_stored_membership_and_says_so(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3)
    member = cluster[2]
    key = fresh_key("stale-flag")
    assert cluster[0].put(key, b"v", ack=3).status == 201
    member.stop()
    stale = (*cluster.urls[:2], member.url, "http://127.0.0.1:9")  # a fourth member nobody added
    restarted = Node(dataclasses.replace(member.config, cluster=stale), tmp_path / "restarted.log")
    restarted.start()
    lines = [line for line in restarted.log_path.read_text().splitlines() if "--cluster differs" in line]
    assert len(lines) == 1, lines
    assert lines[0].endswith(
        "--cluster differs from the stored membership (version 1), which this node keeps: "
        "http://127.0.0.1:9 is in --cluster and not a member"
    )
    status = restarted.status()
    assert status is not None and status["cluster"] == cluster.urls
    assert total(scrape(restarted), "kvnode_membership_version") == 1
    assert restarted.get(key, ack=3).body == b"v"  # it still talks to the others, as before
    restarted.stop()


def test_a_data_dir_of_another_member_is_refused_in_one_line(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(2)
    member = cluster[1]
    member.stop()
    [port] = free_ports(1)
    other = dataclasses.replace(
        member.config, port=port, cluster=(cluster.urls[0], f"http://127.0.0.1:{port}")
    )
    system = SystemDb.open(member.config.data_dir)
    try:
        assert system.membership.load() == Membership.seeded(cluster.urls)
    finally:
        system.close()
    with pytest.raises(NodeStartError, match="is not a member of the cluster stored in"):
        Node(other, tmp_path / "other.log").start()
