"""kvnode.ops.flag_table: every node flag sets the NodeConfig field of its name, its default is that
field's (but for the two a node must be given), cluster shares the node's tuning flags, and the table's own
value parsers refuse what they do not know with the choices."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from kvnode.cluster.crash_points import CRASH_POINTS
from kvnode.config import NodeConfig
from kvnode.ops.flag_table import CLUSTER_FLAGS, NODE_FLAGS, Flag

REQUIRED = {"--port", "--data-dir"}  # a node has no default place to listen or keep its data


def by_name(flags: list[Flag]) -> dict[str, Flag]:
    table = {flag.name: flag for flag in flags}
    assert len(table) == len(flags), "a flag is in the table twice"
    return table


def test_each_node_flag_sets_the_config_field_of_its_name_with_its_default() -> None:
    defaults = NodeConfig()
    fields = {field.name for field in dataclasses.fields(NodeConfig)}
    for flag in NODE_FLAGS:
        assert flag.dest in fields, flag.name
        if flag.name in REQUIRED:
            assert flag.default is None and not flag.optional, flag.name
        else:
            assert flag.default == getattr(defaults, flag.dest), flag.name
    # The secret itself is no flag: it comes from a file or KVNODE_CLUSTER_SECRET (kvnode.ops.flags).
    assert fields - {flag.dest for flag in NODE_FLAGS} == {"cluster_secret"}


def test_cluster_shares_the_nodes_tuning_flags_and_has_its_own() -> None:
    node, cluster = by_name(NODE_FLAGS), by_name(CLUSTER_FLAGS)
    shared = {name for name in cluster if cluster[name] is node.get(name)}
    own = set(cluster) - shared
    assert own == {
        "--nodes", "--machines", "--per-machine", "--model-datacenters", "--model-zones", "--port",
        "--data-dir", "--tls",
    }  # fmt: skip
    assert {"--fanout", "--timeout-ms", "--cluster-secret-file", "--fsync"} <= shared
    assert cluster["--port"].default == NodeConfig().port  # a cluster starts where `make run` expects it
    assert cluster["--data-dir"].default == NodeConfig().data_dir


def test_a_flag_names_its_field_and_its_variable() -> None:
    flag = Flag("--max-clock-skew-ms", int, 5, "help")
    assert (flag.dest, flag.env) == ("max_clock_skew_ms", "KVNODE_MAX_CLOCK_SKEW_MS")


@pytest.mark.parametrize(
    ("name", "good", "bad", "refusal"),
    [
        (
            "--fanout",
            ["async", "sync", "speculative"],
            "parallel",
            "fanout is one of async, sync, speculative",
        ),
        ("--crash-at", ["", *CRASH_POINTS], "change:nowhere", "a crash point is one of"),
        ("--join", ["", "http://127.0.0.1:9000"], "127.0.0.1:9000", "URLs look like http://HOST:PORT"),
        ("--replace", ["", "https://[::1]:9000"], "ftp://x", "URLs look like http://HOST:PORT"),
    ],
)
def test_the_tables_own_parsers_take_their_values_and_refuse_others(
    name: str, good: list[str], bad: str, refusal: str
) -> None:
    parse = by_name(NODE_FLAGS)[name].parse
    assert parse is not None
    assert [parse(text) for text in good] == good  # "" stands for unset where a flag may be
    with pytest.raises(argparse.ArgumentTypeError, match=f"{refusal}.*got {bad!r}$"):
        parse(bad)
