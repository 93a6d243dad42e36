"""kvnode.ops.cluster_config: a local cluster's nodes (consecutive ports, or machines modelled on loopback
whose members share a client port), each with its certificate under --tls; what it refuses; and the
members of a stored membership that a launcher runs again."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.config import NodeConfig, ReplicationFactor
from kvnode.ops.cluster_config import ClusterConfig, cluster_configs, member_configs, stored_membership
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership


def test_nodes_are_on_consecutive_ports_and_each_is_given_every_url() -> None:
    configs = ClusterConfig(nodes=2, node=NodeConfig(host="::1", port=8080)).node_configs()
    assert [config.url for config in configs] == ["http://[::1]:8080", "http://[::1]:8081"]
    assert all(config.cluster == ("http://[::1]:8080", "http://[::1]:8081") for config in configs)
    assert [config.data_dir.name for config in configs] == ["node-8080", "node-8081"]


def test_nodes_on_given_ports_with_given_members_and_data_dirs(tmp_path: Path) -> None:
    members = ("http://127.0.0.1:9005", "http://127.0.0.1:9001")
    configs = ClusterConfig(node=NodeConfig(data_dir=tmp_path)).node_configs([9005, 9001], members)
    assert [(config.port, config.cluster) for config in configs] == [(9005, members), (9001, members)]
    dirs = [tmp_path / "one", tmp_path / "two"]
    assert [config.data_dir for config in cluster_configs(NodeConfig(), [1, 2], dirs)] == dirs


def test_with_tls_each_node_serves_https_with_its_own_certificate(tmp_path: Path) -> None:
    cluster = ClusterConfig(nodes=2, node=NodeConfig(port=9000, data_dir=tmp_path), tls=True)
    configs = cluster.node_configs()
    assert [config.url for config in configs] == ["https://127.0.0.1:9000", "https://127.0.0.1:9001"]
    assert all(config.cluster == tuple(c.url for c in configs) for config in configs)
    assert [(config.tls_cert, config.tls_key) for config in configs] == [
        (tmp_path / "tls" / f"node-{port}.pem", tmp_path / "tls" / f"node-{port}.key")
        for port in (9000, 9001)
    ]
    assert {config.tls_ca for config in configs} == {tmp_path / "tls" / "ca.pem"}
    assert cluster.client_urls() == [config.url for config in configs]


def test_machines_are_loopback_addresses_whose_members_share_a_client_port() -> None:
    cluster = ClusterConfig(node=NodeConfig(port=9000), machines=2, per_machine=3)
    configs = cluster.node_configs()
    assert [config.url for config in configs] == [
        f"http://127.0.0.{host}:{port}" for host in (1, 2) for port in (9001, 9002, 9003)
    ]
    assert {config.client_port for config in configs} == {9000}
    assert all(config.cluster == tuple(c.url for c in configs) for config in configs)
    assert configs[4].data_dir.name == "node-127.0.0.2-9002"
    assert cluster.client_urls() == ["http://127.0.0.1:9000", "http://127.0.0.2:9000"]


@pytest.mark.parametrize(
    ("machines", "per_machine", "replication_factor", "expected"),
    [(3, 2, 0, 3), (1, 2, 0, 2), (3, 2, 5, 5)],
)
def test_machines_keep_three_copies_unless_told_or_fewer_members(
    machines: int, per_machine: int, replication_factor: int, expected: int
) -> None:
    node = NodeConfig(replication_factor=ReplicationFactor(replication_factor))
    configs = ClusterConfig(node=node, machines=machines, per_machine=per_machine).node_configs()
    assert {config.replication_factor for config in configs} == {ReplicationFactor(expected)}


def test_machines_are_modelled_in_datacenters_and_zones_each_holding_three_copies() -> None:
    cluster = ClusterConfig(
        node=NodeConfig(port=9000), machines=6, per_machine=2, model_datacenters=2, model_zones=3
    )
    configs = cluster.node_configs()
    zones = ("z1", "z1", "z2", "z2", "z3", "z3") * 2
    datacenters = ("dc1",) * 6 + ("dc2",) * 6
    assert all((config.zones, config.datacenters) == (zones, datacenters) for config in configs)
    assert {str(config.replication_factor) for config in configs} == {"3"}
    nodes = ClusterConfig(nodes=4, model_datacenters=2).node_configs()  # without machines: each node
    assert {config.datacenters for config in nodes} == {("dc1", "dc1", "dc2", "dc2")}
    assert {config.zones for config in nodes} == {()}  # each its host's zone, as by default
    assert ClusterConfig(nodes=4).node_configs()[0].datacenters == ()


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"nodes": 0}, "at least one node"),
        ({"nodes": 2, "model_datacenters": 3}, "--model-datacenters 3 exceeds the 2 machines"),
        ({"nodes": 2, "node": NodeConfig(port=65535)}, "ports 65535..65536 run past 65535"),
        ({"machines": 2, "per_machine": 2, "node": NodeConfig(port=65534)}, "run past 65535"),
        ({"machines": 255}, "between 1 and 254"),
        ({"machines": 2, "tls": True}, "leave out --tls"),
        ({"machines": 2, "node": NodeConfig(host="::1")}, "leave out --host"),
    ],
)
def test_a_cluster_that_cannot_be_run_is_refused(options: dict[str, object], refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        ClusterConfig(**options)  # type: ignore[arg-type]


def store(node_dir: Path, membership: Membership | None) -> None:
    system = SystemDb.open(node_dir)
    try:
        if membership is not None:
            system.membership.save(membership)
    finally:
        system.close()


def test_the_newest_stored_membership_is_found_among_the_node_dirs(tmp_path: Path) -> None:
    assert stored_membership(tmp_path) is None
    first = Membership.seeded(["http://127.0.0.1:9000", "http://127.0.0.1:9001"])
    newer = first.with_joining("http://127.0.0.1:9002")
    store(tmp_path / "node-9000", first)
    store(tmp_path / "node-9001", newer)
    store(tmp_path / "node-9002", None)  # started, never stored one
    (tmp_path / "node-9003").mkdir()  # no system database
    (tmp_path / "other" / "system").mkdir(parents=True)  # not a node dir
    assert stored_membership(tmp_path) == newer


def test_a_launcher_runs_the_members_at_its_host_and_names_the_others(tmp_path: Path) -> None:
    urls = [
        "http://127.0.0.1:9001",
        "http://192.0.2.1:9000",
        "http://127.0.0.1:9000",
        "http://localhost:9002",
    ]
    membership = Membership.seeded(urls)
    ours, others = member_configs(ClusterConfig(node=NodeConfig(data_dir=tmp_path)), membership)
    assert [(config.port, config.data_dir) for config in ours] == [
        (9001, tmp_path / "node-9001"),
        (9000, tmp_path / "node-9000"),
    ]
    assert all(config.cluster == membership.urls for config in ours)
    assert others == ["http://192.0.2.1:9000", "http://localhost:9002"]


def test_a_launcher_of_machines_runs_the_members_at_loopback_addresses(tmp_path: Path) -> None:
    urls = ["http://127.0.0.2:9001", "http://192.0.2.1:9001", "http://127.0.0.1:9002"]
    membership = Membership.seeded(urls)
    cluster = ClusterConfig(node=NodeConfig(port=9000, data_dir=tmp_path), machines=2, per_machine=1)
    ours, others = member_configs(cluster, membership)
    assert [(config.url, config.client_port, config.data_dir.name) for config in ours] == [
        ("http://127.0.0.2:9001", 9000, "node-127.0.0.2-9001"),
        ("http://127.0.0.1:9002", 9000, "node-127.0.0.1-9002"),
    ]
    assert others == ["http://192.0.2.1:9001"]
