"""The one snapshot of a node's figures on a real cluster: every figure described shown by /v0/stats,
/metrics and admin."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kvnode.figures import Figure, Kind
from kvnode.replica.peer_figures import PEER_FIGURES
from tests.figure_tables import every_table
from tests.harness import ClusterFactory, request, stats, wait_for


def shown(view: dict[str, Any], figure: Figure) -> bool:
    head, _, tail = figure.json_key.partition(".")
    return head in view and (not tail or tail in view[head])


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
