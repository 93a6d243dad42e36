"""A node whose disk was lost, on real node processes: it is recognised by its new identity, answers reads
"not ready" (never 404) while it rebuilds from its peers, takes writes meanwhile, and afterwards serves
every key alone; a crash during the rebuild resumes it. A new cluster serves at once."""

from __future__ import annotations

import dataclasses
import json
import shutil
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    ClusterFactory,
    Node,
    clean_env,
    key_where,
    request,
    run_kvnode,
    scrape,
    stats,
    total,
    wait_for,
)

SECRET = "rebuild-test-secret-" * 2
KEYS = 40  # acknowledged keys whose first replica is the node that loses its disk
# Records of the rebuild a member leaves during; its rate (a twentieth of them a second) keeps A's part
# of the rebuild about 20 s, whatever the count, so that D leaves before B's turn with it.
LEAVE_KEYS = 400


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


def test_a_wiped_node_rebuilds_never_answering_404_then_serves_every_key_alone(
    start_cluster: ClusterFactory,
) -> None:
    """With C down the rebuild cannot complete, so B is seen rebuilding for as long as the test needs; a
    crash then resumes it; C back, it completes."""
    cluster = start_cluster(3)
    a, b, c = cluster
    keys = [key_where(cluster.urls, "lost", lambda order: order[0] == b.url) for _ in range(KEYS)]
    for key in keys:
        assert a.put(key, key.encode(), ack=3).status == 201
    c.stop()
    wipe(b)
    wait_for(partial(in_state, b, "rebuilding"), what="the wiped node rebuilding")
    assert "came back as another node" in a.log_path.read_text()

    for key in keys:  # it never answers for a key it lost, not even "absent", to itself or to a peer
        assert b.get(key, ack=1, from_=1).status == 504  # a failed replica
        assert a.get(key, ack=1, from_=1).status == 504
        response = b.get(key, ack=1)  # a peer answers instead
        assert (response.status, response.body) == (200, key.encode())
    written = key_where(cluster.urls, "during", lambda order: order[0] == b.url)
    assert b.put(written, b"taken", ack=2).status == 201  # writes are taken meanwhile
    wait_for(lambda: stats(b)["rebuild"]["peers_done"] == 1, what="the repair with A")
    finished = run_kvnode(["admin", "--url", b.url, "status"], b.config.data_dir, clean_env())
    assert f"data: {b.url} is rebuilding: 1 of 2 peers done" in finished.stdout, finished.stdout
    assert total(scrape(b), "kvnode_rebuild_records_total") >= KEYS

    b.kill()  # a crash during the rebuild: it resumes, never back to serving unrepaired
    b.start()
    assert node_state(b) == "rebuilding"
    c.start()
    wait_for(partial(in_state, b, "serving"), what="the rebuild to complete")

    a.stop()
    c.stop()
    for key in keys:
        response = b.get(key, ack=1)
        assert (response.status, response.body) == (200, key.encode())
    assert b.get(written, ack=1).body == b"taken"


@pytest.mark.slow
def test_a_rebuild_that_a_member_leaves_during_completes_with_the_members_left(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    """B rebuilds from A, C and D in that order, slowly (20 records a second from A); D leaves meanwhile.
    The rebuild then waits for the members there are, not for D (before, it asked D after D had left and
    never completed)."""
    cluster = start_cluster(4, cluster_secret=SECRET)
    a, b, _, d = cluster
    for i in range(LEAVE_KEYS):
        assert a.put(f"k{i}", b"v", ack=4).status == 201
    b.stop()
    shutil.rmtree(b.config.data_dir)
    slow = Node(dataclasses.replace(b.config, repair_rate=LEAVE_KEYS // 20), b.log_path)
    slow.start()
    wait_for(partial(in_state, slow, "rebuilding"), what="the wiped node rebuilding")
    left = run_kvnode(["admin", "--url", a.url, "leave", d.url, "--wait"], tmp_path, clean_env())
    assert left.returncode == 0, left.stderr
    # D is the last peer it repairs with, and A alone takes it 20 s: D left before its turn.
    assert node_state(slow) == "rebuilding", "the scenario needs D to leave mid-rebuild"
    wait_for(partial(in_state, slow, "serving"), seconds=60, what="the rebuild completing without D")
    assert len(slow.scan("k", "l")) == LEAVE_KEYS  # every record, in its own storage
