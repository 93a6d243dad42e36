"""kvnode.replica.peer on real nodes: what a peer's state says when it is not connected (stopped: down,
and for how long; refused for the secret: refused, with both ends saying which side lacks or differs in
the secret and how to pass it), and that a fresh cluster connects its peers at start, so its first write
keeps no hint; and that a call's callback may call the peer again at once."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kvnode.replica.channel.handshake import ClusterAuth
from kvnode.replica.peer import PeerReplica
from kvnode.topology.membership import cluster_identity
from tests.harness import ClusterFactory, Node, request, wait_for, wait_for_log

SECRET = "the-cluster-secret-" * 2


def get_json(node: Node, path: str) -> Any:
    response = request(node.url, "GET", path)
    assert response.status == 200, response.text
    return json.loads(response.body)


def peer_state(node: Node, peer: Node) -> str:
    state: str = get_json(node, "/v0/stats")["peers"][peer.url]
    return state


def member_view(node: Node, peer: Node) -> dict[str, Any]:
    """``peer`` as ``node``'s view of its cluster shows it (what ``admin status`` prints)."""
    members = get_json(node, "/v0/cluster")["members"]
    found: dict[str, Any] = next(member for member in members if member["url"] == peer.url)
    return found


def test_a_fresh_cluster_connects_its_peers_at_start_and_its_first_write_keeps_no_hint(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)

    def all_connected() -> bool:
        return all(set(get_json(node, "/v0/stats")["peers"].values()) == {"connected"} for node in cluster)

    wait_for(all_connected, 15.0, "every node connected to every peer, with no request yet")
    for node in cluster:
        assert node.put(f"first-{node.url}", b"v").status == 201
    for node in cluster:
        assert get_json(node, "/v0/stats")["hints"]["kept"] == {}


def test_a_stopped_peer_is_down_since_it_stopped_not_since_the_last_attempt(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    asked, stopped = cluster[0], cluster[2]
    assert asked.put("warm", b"v", ack=3).status == 201
    stopped_at = time.monotonic()  # before: the channel may close while stop() waits for the exit
    stopped.stop()
    wait_for(lambda: peer_state(asked, stopped) == "down", 15.0, "the stopped peer shown down")
    time.sleep(1.5)  # the time being measured, not synchronisation
    assert asked.put("while-down", b"v").status == 201  # its attempt to connect fails again
    view = member_view(asked, stopped)  # probes it once more
    assert view["state"] == "down" and not view["reachable"]
    assert 1.5 <= view["down_for_s"] <= time.monotonic() - stopped_at, view
    stopped.start()
    wait_for(lambda: member_view(asked, stopped)["state"] == "connected", 15.0, "the peer back")
    assert member_view(asked, stopped)["down_for_s"] == 0


def start_without_the_secret(node: Node, tmp_path: Path) -> Node:
    """``node`` stopped and started again on its data dir without the cluster's secret."""
    node.stop()
    config = dataclasses.replace(node.config, cluster_secret=b"", cluster_secret_file=None)
    restarted = Node(config, tmp_path / "no-secret.log")
    restarted.start()
    return restarted


def test_a_member_started_without_the_secret_is_refused_and_both_ends_say_why(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    member = cluster[0]
    assert member.put("warm", b"v", ack=3).status == 201
    started = time.monotonic()
    lacking = start_without_the_secret(cluster[2], tmp_path)
    try:
        # The member asks it for a challenge (it has none to give); it asks the member without credentials.
        # Each end logs two events of its own, the refusal its channel met and the one its server gave,
        # in either order: each is waited for.
        assert member.put("after", b"v", ack=2).status == 201
        wait_for_log(member, "no cluster credentials: the connecting node runs without a cluster secret")
        member_log = wait_for_log(member, f"replica channel to {lacking.url} refused")
        assert f"{lacking.url} runs without a cluster secret, and this node has one" in member_log
        assert "--cluster-secret-file FILE or KVNODE_CLUSTER_SECRET" in member_log
        assert "DATA_DIR/cluster.secret" in member_log
        wait_for_log(lacking, "refused a replica channel challenge: this node runs without a cluster secret")
        lacking_log = wait_for_log(lacking, f"replica channel to {member.url} refused")
        assert f"{member.url} requires a cluster secret, and this node has none" in lacking_log
        for line in (*member_log.splitlines(), *lacking_log.splitlines()):  # each says the fix once
            assert line.count("--cluster-secret-file") <= 1, line
        wait_for(lambda: peer_state(member, lacking) == "refused", 15.0, "the member to show it refused")
        wait_for(lambda: peer_state(lacking, member) == "refused", 15.0, "it to show the member refused")
        status = subprocess.run(
            [sys.executable, "-m", "kvnode", "admin", "--url", member.url, "status"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert "refused: secret" in next(line for line in status.splitlines() if line.startswith(lacking.url))
        # Rate-limited: a line per 5 s at most (the first at once), however many attempts were refused.
        lines = member.log_path.read_text().count(f"replica channel to {lacking.url} refused")
        assert lines <= 1 + (time.monotonic() - started) / 5, lines
    finally:
        lacking.stop()


async def refusal_of(node: Node, auth: ClusterAuth | None) -> tuple[str, str, str]:
    """A PeerReplica's state and refusal after one call to ``node`` with ``auth``, and the call's error."""
    peer = PeerReplica(node.url, 2.0, auth=auth)
    try:
        outcome = await asyncio.gather(peer.read(b"k"), return_exceptions=True)
        return peer.state, peer.refusal, str(outcome[0])
    finally:
        await peer.close()


def test_a_refused_handshake_names_what_it_was_about(start_cluster: ClusterFactory) -> None:
    with_secret = start_cluster(2, cluster_secret=SECRET)
    urls = tuple(with_secret.urls)
    target = with_secret[0]
    cases = {
        "lacks the secret": (None, "secret", "requires a cluster secret, and this node has none"),
        "another secret": (
            ClusterAuth(b"another secret, long enough", cluster_identity(urls), urls[1]),
            "secret",
            "holds a different cluster secret",
        ),
        "another cluster": (
            ClusterAuth(SECRET.encode(), cluster_identity((*urls, "http://127.0.0.1:1")), urls[1]),
            "secret",
            "belongs to another cluster",
        ),
    }
    for name, (auth, refusal, text) in cases.items():
        state, cause, error = asyncio.run(refusal_of(target, auth))
        assert (state, cause) == ("refused", refusal), name
        assert "403" in error and text in error, (name, error)
    without_secret = start_cluster(2)[0]
    members = (without_secret.url, "http://127.0.0.1:1")
    auth = ClusterAuth(SECRET.encode(), cluster_identity(members), "http://127.0.0.1:1")
    state, cause, error = asyncio.run(refusal_of(without_secret, auth))
    assert (state, cause) == ("refused", "secret")
    assert "runs without a cluster secret, and this node has one" in error
