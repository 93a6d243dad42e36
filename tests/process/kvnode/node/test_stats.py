"""An operator's endpoints (kvnode.node.stats): on real nodes, /v0/stats, /v0/cluster and /metrics read one
snapshot, so they agree, and their JSON ends with a newline; on nodes served in this process, /v0/cluster
names the claimant and the change under way, and the member that walks it says its part until the version
past it."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kvnode.replica.channel.protocol import CURRENT_VERSION
from tests.harness import ClusterFactory, Node, request, wait_for


def get_json(node: Node, path: str) -> Any:
    response = request(node.url, "GET", path)
    assert response.status == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.text.endswith("}\n"), repr(response.text[-20:])
    return json.loads(response.text)


def hints_pending_metric(node: Node) -> dict[str, float]:
    text = request(node.url, "GET", "/metrics").text
    return {
        sample.labels["peer"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "kvnode_hints_pending"
        for sample in family.samples
    }


def test_stats_cluster_and_metrics_agree_on_a_stopped_peers_hints(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    coordinator, running, stopped = cluster[0], cluster[1], cluster[2]
    assert coordinator.put("warm", b"v", ack=3).status == 201
    stopped.stop()
    for i in range(2):
        assert coordinator.put(f"missed-{i}", b"v").status == 201
    wait_for(lambda: get_json(coordinator, "/v0/stats")["hints"]["pending"] == {stopped.url: 2}, what="hints")

    stats = get_json(coordinator, "/v0/stats")
    assert stats["node"] == coordinator.url
    assert set(stats) == {
        "node", "fanout", "cluster", "loop_lag_ms", "peers", "clock", "hints", "gc", "repair", "requests",
        "coordinator", "paxos", "rebuild", "protocol", "connections", "membership", "identities", "answered",
    }  # fmt: skip
    assert stats["answered"]["calls"] >= stats["answered"]["frames"]  # the peers' frames, each of calls
    assert stats["hints"]["kept"][stopped.url] >= 2
    assert stats["peers"][running.url] == "connected"
    assert stats["peers"][stopped.url] != "connected"
    newest = CURRENT_VERSION
    assert stats["protocol"] == {"speaks": f"1-{newest}", "peers": {running.url: newest, stopped.url: 0}}

    view = get_json(coordinator, "/v0/cluster")
    assert view["hints"]["pending"] == {running.url: 0, stopped.url: 2}  # every peer, 0 included
    assert view["hints"]["kept"][stopped.url] == stats["hints"]["kept"][stopped.url]
    members = {member["url"]: member for member in view["members"]}
    assert members[coordinator.url]["state"] == "self"
    assert members[running.url]["reachable"] and not members[stopped.url]["reachable"]
    assert stats["rebuild"] == view["rebuild"]
    assert view["rebuild"]["state"] == members[coordinator.url]["node_state"] == "serving"

    assert hints_pending_metric(coordinator) == {running.url: 0, stopped.url: 2}
