"""A node whose disk was lost, on real node processes: it is recognised by its new identity, answers reads
"not ready" (never 404) while it rebuilds from its peers, takes writes meanwhile, and afterwards serves
every key alone; a crash during the rebuild resumes it. A new cluster serves at once."""

from __future__ import annotations

import json
import shutil
from functools import partial
from typing import Any

import pytest

from tests.harness import ClusterFactory, Node, request, stats, wait_for

SECRET = "rebuild-test-secret-" * 2


def node_state(node: Node) -> str:
    state: str = stats(node)["rebuild"]["state"]
    return state


def cluster_view(node: Node) -> dict[str, Any]:
    response = request(node.url, "GET", "/v0/cluster")
    assert response.status == 200
    view: dict[str, Any] = json.loads(response.body)
    return view


def in_state(node: Node, state: str) -> bool:
    return node_state(node) == state


def sees_every_member_serve(node: Node) -> bool:
    return all(member["node_state"] == "serving" for member in cluster_view(node)["members"])


def wipe(node: Node) -> None:
    """Stop the node, lose its data dir, start it again under the same URL."""
    node.stop()
    shutil.rmtree(node.config.data_dir)
    node.start()


@pytest.mark.parametrize("secret", ["", SECRET], ids=["no-secret", "secret"])
def test_a_new_cluster_serves_on_every_node_and_its_members_know_each_other(
    start_cluster: ClusterFactory, secret: str
) -> None:
    cluster = start_cluster(3, cluster_secret=secret)
    for node in cluster:
        wait_for(partial(in_state, node, "serving"), what=f"{node.url} serving")
    identities = {node.url: stats(node)["rebuild"]["identity"] for node in cluster}
    assert len(set(identities.values())) == 3
    for node in cluster:
        members = cluster_view(node)["members"]  # its probe meets every peer
        assert {m["url"]: m["identity"] for m in members} == identities
        wait_for(partial(sees_every_member_serve, node), what=f"{node.url} hearing every member serve")
