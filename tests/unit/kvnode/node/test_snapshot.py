"""The one snapshot of a node's figures (kvnode.node.snapshot, read by NodeParts.snapshot): every table in
kvnode read, each once, into a copy."""

from __future__ import annotations

import collections

from kvnode.figures import Kind
from kvnode.node.stats import cluster_view, stats_view
from kvnode.replica.peer_figures import PEER_FIGURES
from tests.drivers import ServedNode
from tests.figure_tables import every_table


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
