"""``python -m kvnode admin`` against real nodes: which members a node
reaches, where a key lives and its owners' Paxos state, the hints it keeps; tables for people, ``--json``
for scripts, exit 2 with one line when the node cannot be asked. And against canned nodes: ``--wait``
following a change on the one member that walks it, as the node asked named it, until the version past
it; locate asking every owner of a key's rounds, one gaining it included, with the admin token."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from kvnode.topology.placement import Placement
from tests.harness import ClusterFactory, Node, request, stats


def admin(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvnode", "admin", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def admin_json(node: Node, *args: str) -> Any:
    done = admin(node.url, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def row_of(table: str, url: str) -> list[str]:
    """The cells of the table row that starts with url."""
    return next(line.split() for line in table.splitlines() if line.startswith(url + " "))


def test_a_fresh_node_reaches_every_member_and_shows_the_ring(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    status = admin_json(cluster[1], "status")
    assert [m["url"] for m in status["members"]] == cluster.urls
    # No traffic yet: the node connects to its peers to answer.
    assert all(m["reachable"] for m in status["members"])
    assert [m["self"] for m in status["members"]] == [False, True, False]
    ring = admin_json(cluster[1], "ring")
    assert [m["url"] for m in ring["members"]] == cluster.urls
    assert abs(sum(m["first_replica_share"] for m in ring["members"]) - 1) < 1e-6


def test_a_stopped_member_is_unreachable_in_status_locate_and_hints(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    asked, stopped = cluster[0], cluster[2]
    assert asked.put("warm", b"v", ack=3).status == 201
    stopped.stop()
    keys = [f"admin-{i}" for i in range(4)]
    for key in keys:
        assert asked.put(key, b"v").status == 201

    status = admin_json(asked, "status")
    reachable = {m["url"]: m["reachable"] for m in status["members"]}
    assert reachable == {asked.url: True, cluster[1].url: True, stopped.url: False}
    table = admin(asked.url, "status")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].split()[:3] == ["MEMBER", "STATE", "REACHABLE"]
    assert row_of(table.stdout, stopped.url)[2] == "no"
    assert row_of(table.stdout, cluster[1].url)[2] == "yes"

    placement = Placement(cluster.urls)
    for key in keys:
        located = admin_json(asked, "locate", key)
        assert [r["url"] for r in located["replicas"]] == placement.order(key.encode())
        assert {r["url"]: r["reachable"] for r in located["replicas"]} == reachable
        # Every member owns every key (N = 3): each is asked for its Paxos state, the stopped one in vain.
        assert {r["url"]: r["paxos"]["answered"] for r in located["replicas"]} == reachable
    assert stopped.url in admin(asked.url, "locate", keys[0]).stdout

    hints = admin_json(asked, "hints")
    assert hints["pending"][stopped.url] == len(keys)
    assert hints["pending"] == {url: stats(asked)["hints"]["pending"].get(url, 0) for url in hints["pending"]}
    assert row_of(admin(asked.url, "hints").stdout, stopped.url)[1] == str(len(keys))


def test_locate_shows_the_paxos_state_a_conditional_write_left_alike_on_every_owner(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    created = request(
        cluster[1].url, "PUT", "/v0/entity", {"id": "lock"}, b"me", headers={"If-None-Match": "*"}
    )
    assert created.status == 201
    located = admin_json(cluster[0], "locate", "lock")
    states = [r["paxos"] for r in located["replicas"]]
    # Committed everywhere: the promise is the commit's ballot, nothing is left accepted.
    assert all(state["answered"] and state["accepted"] is None for state in states)
    assert len({(state["promised"], state["committed"]) for state in states}) == 1
    assert states[0]["promised"] == states[0]["committed"] is not None
    table = admin(cluster[0].url, "locate", "lock").stdout
    assert table.splitlines()[5].startswith("Paxos state of the key")
    assert row_of(table, cluster[2].url)[1:] == [states[0]["promised"], "-", states[0]["committed"]]


def test_a_node_that_cannot_be_asked_exits_2_with_one_line(node: Node) -> None:
    port = node.config.port
    node.stop()
    lines = []
    for args in ([f"http://127.0.0.1:{port}", "status"], ["not-a-url", "status"]):
        done = admin(*args)
        assert done.returncode == 2
        assert done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        lines.append(done.stderr)
    assert "connection refused: check --url (or KVNODE_URL), and that the node runs" in lines[0]
