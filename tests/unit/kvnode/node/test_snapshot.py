"""The one snapshot of a node's figures (kvnode.node.snapshot, read by NodeParts.snapshot): every table in
kvnode read, each once, into a copy; and every figure described shown by /v0/stats, /metrics and admin."""

from __future__ import annotations

import collections
import importlib
import json
import pkgutil
import subprocess
import sys
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

import kvnode
from kvnode.figures import Figure, Figures, Kind
from kvnode.node.stats import cluster_view, stats_view
from kvnode.replica.peer_figures import PEER_FIGURES
from tests.drivers import ServedNode
from tests.harness import ClusterFactory, request, stats, wait_for


def every_table() -> list[Figures]:
    """Every table of figures described in kvnode, wherever it is."""
    tables: list[Figures] = []
    for module in pkgutil.walk_packages(kvnode.__path__, "kvnode."):
        if module.name != "kvnode.__main__":
            found = vars(importlib.import_module(module.name)).values()
            tables += [table for table in found if isinstance(table, Figures) and table not in tables]
    return tables


def shown(view: dict[str, Any], figure: Figure) -> bool:
    head, _, tail = figure.json_key.partition(".")
    return head in view and (not tail or tail in view[head])


def test_every_metric_is_one_family_of_one_kind_and_help_and_no_json_key_is_described_twice() -> None:
    families: dict[str, tuple[Kind, str, tuple[str, ...]]] = {}
    sections: dict[str, list[str]] = collections.defaultdict(list)
    for table in every_table():
        sections[table.section or table.group] += [row.json_key for row in table.rows]
        for row in table.rows:
            if row.metric:
                described = (row.kind, row.help, row.label_names)
                assert families.setdefault(row.metric, described) == described, row.metric
    for section, keys in sections.items():
        assert len(keys) == len(set(keys)), section


async def test_the_snapshot_reads_every_table_in_kvnode_and_each_peer(one_of_three: ServedNode) -> None:
    parts = one_of_three.parts
    snapshot = parts.snapshot()
    read = [reading.table for reading in snapshot.readings]
    assert len(read) == len(set(read))
    assert sorted(t.group for t in [*read, PEER_FIGURES]) == sorted(t.group for t in every_table())
    assert snapshot.peer_urls == list(parts.membership.urls[1:])
    assert all(reading.table is PEER_FIGURES for _, reading in snapshot.peers)


async def test_a_snapshot_stays_as_it_was_read(one_of_three: ServedNode) -> None:
    parts = one_of_three.parts
    peer = parts.membership.urls[1]
    snapshot = parts.snapshot()
    parts.coordinator.stats.rewrites += 1
    parts.hints.kept[peer] += 2
    parts.gc.counts.waiting_for[peer] = 3
    before = stats_view(parts, snapshot)
    assert before["coordinator"]["rewrites"] == 0
    assert before["hints"]["kept"] == {} and before["gc"]["waiting_for"] == {}
    after = parts.snapshot()
    assert stats_view(parts, after)["coordinator"]["rewrites"] == 1
    view = cluster_view(parts.config.url, parts.membership, after, parts.own_part.progress)
    assert view["hints"]["kept"] == {peer: 2, parts.membership.urls[2]: 0}  # every peer's, 0 included
    assert view["gc"]["waiting_for"] == {peer: 3}  # as the last pass found it, no more


def admin_json(url: str, command: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "kvnode", "admin", "--url", url, command, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_described_figure_is_in_stats_metrics_and_admin(start_cluster: ClusterFactory) -> None:
    """A number in /v0/stats and /metrics, a text in /v0/stats only; in admin where admin reports the
    figure's section (the clocks, GC, the rebuild, hints) or a member (a peer's figures, which /v0/stats
    shows as its state alone)."""
    node, other = start_cluster(2)
    wait_for(lambda: stats(node)["peers"][other.url] == "connected", what="the peer connected")
    view = stats(node)
    metrics = {
        family.name for family in text_string_to_metric_families(request(node.url, "GET", "/metrics").text)
    }
    status = admin_json(node.url, "status")
    admin = {"clock": status["clock"], "gc": status["gc"], "rebuild": status["rebuild"]}
    admin["hints"] = admin_json(node.url, "hints")
    member = next(m for m in status["members"] if m["url"] == other.url)
    assert view["peers"][other.url] == member["state"]
    for table in every_table():
        section = table.section or table.group
        for figure in table.rows:
            assert figure.kind is Kind.TEXT or figure.metric in metrics, figure.metric
            if table is PEER_FIGURES:
                assert figure.json_key in member, figure.json_key
            else:
                assert shown(view[section], figure), (section, figure.json_key)
                assert section not in admin or shown(admin[section], figure), (section, figure.json_key)
