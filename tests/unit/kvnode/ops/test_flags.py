"""kvnode.ops.flags: the command line and its environment variables, parsed into a config or refused with
one line (exit 2), and node_argv, the command line back from a config. Real processes where a node runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvnode.config import NodeConfig, ReplicationFactor
from kvnode.ops.flags import node_argv, node_env, parse_args
from tests.harness import (
    write_secret_file,
)

SECRET = "a cluster secret of more than enough bytes"


def test_node_argv_gives_back_a_config_with_every_field_set_away_from_its_default(tmp_path: Path) -> None:
    members = ("https://[::1]:9001", "https://[::1]:9002", "https://proxy.example:9003")
    tokens = write_secret_file(tmp_path / "tokens", "a-client-token admin")
    config = NodeConfig(
        host="::1",
        port=9002,
        client_port=9000,
        data_dir=tmp_path / "data",
        cluster=members,
        replication_factor=ReplicationFactor.parse("dc1:2,dc2:1"),
        zones=("z1", "z2", "z3"),
        datacenters=("dc1", "dc1", "dc2"),
        fanout="speculative",
        timeout_ms=1234,
        speculative_ceiling_ms=77,
        phi_threshold=12.5,
        acceptable_pause_ms=3000,
        max_clock_skew_ms=4321,
        clock_offset_ms=-250,
        join_timeout_s=45,
        hint_window_s=60,
        gc_grace_s=120,
        max_hints_per_peer=99,
        hint_rate=5,
        repair_interval_s=60,
        repair_rate=10,
        remote_repair_rate=3,
        max_body_bytes=1000,
        body_timeout_s=3,
        max_inflight=7,
        max_inflight_bytes=5000,
        max_connections=50,
        header_timeout_s=4,
        idle_timeout_s=9,
        cluster_secret=SECRET.encode(),
        cluster_secret_file=write_secret_file(tmp_path / "cluster.secret", SECRET),
        fsync=True,
        access_log=True,
        advertise_url="https://proxy.example:9003",
        tls_cert=tmp_path / "node.pem",
        tls_key=tmp_path / "node.key",
        tls_ca=tmp_path / "ca.pem",
        tls_client_auth=True,
        auth_tokens_file=tokens,
        metrics_open=True,
        max_protocol=1,
        paxos_defect="ignore-accepted",
    )
    # A node becoming a member learns the members from its seed: --join and --cluster exclude each other;
    # it is given its own zone and datacenter, unless it replaces a member (it takes that one's).
    joining = dataclasses.replace(
        config,
        cluster=(),
        zones=(),
        datacenters=(),
        replication_factor=ReplicationFactor(),
        join="https://[::1]:9005",
        zone="z4",
        datacenter="dc2",
        crash_at="change:stored",
    )
    replacing = dataclasses.replace(joining, zone="", datacenter="", replace="https://[::1]:9006")
    defaults = NodeConfig()
    unchanged = [
        f.name
        for f in dataclasses.fields(NodeConfig)
        if all(getattr(one, f.name) == getattr(defaults, f.name) for one in (config, joining, replacing))
    ]
    assert unchanged == [], "set every field away from its default, so node_argv is checked for it"
    for one in (config, joining, replacing):
        argv = node_argv(one)
        assert argv[1:4] == ["-m", "kvnode", "node"]
        assert parse_args(argv[3:], node_env(one)) == one


def test_the_secret_travels_in_the_environment_when_no_file_holds_it(tmp_path: Path) -> None:
    config = NodeConfig(data_dir=tmp_path, cluster_secret=SECRET.encode())
    argv = node_argv(config)
    assert SECRET not in " ".join(argv)
    assert parse_args(argv[3:], node_env(config)) == config
