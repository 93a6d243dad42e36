"""A node joining a running cluster (``node --join SEED``), with real nodes: writes go to the old and the
new owners of a key while reads stay on the old ones, the newcomer streams what it will own (a full
anti-entropy repair with every member), then becomes a member like the others; no acknowledged write is
lost on the way, under a writer, nor when a node taking part is killed at a step of the change; a join on
a port in use claims nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from kvnode.ops.processes import NodeStartError
from kvnode.topology.placement import Placement
from tests.changes import (
    SECRET,
    Writer,
    assert_readable,
    crashing,
    fill,
    local_keys,
    newcomer,
    owned_by,
    restarted_to_crash,
    run_node,
    settled,
    start_crashing,
    status_of,
    versions,
)
from tests.harness import ClusterFactory, Node, assert_exit_2_with_one_line, request, scrape, total, wait_for


def test_a_node_joins_under_writes_without_losing_an_acknowledged_one(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    everywhere, two = fill(cluster)
    new = newcomer(cluster, tmp_path)
    with Writer(cluster[1], "during") as writer:
        wait_for(lambda: len(writer.acknowledged) >= 50, what="writes acknowledged before the join")
        new.start()
        members = [*cluster.urls, new.url]
        nodes = [*cluster.nodes, new]
        settled(nodes, members)
        wait_for(lambda: len(writer.acknowledged) >= 100, what="writes acknowledged after it")
    everywhere += writer.acknowledged  # written with the default from = N = 3: on each key's 3 owners
    assert versions(nodes) == [3] * 4  # joining, then settled
    assert [status_of(node)["replication_factor"] for node in nodes] == [3] * 4  # a join adds no copies
    # The newcomer holds every key it owns, before any client reads one (a read would repair it); the
    # last writes' copies to it may still be on their way (a replica beyond ack, or a hint).
    owned = owned_by(new.url, members, everywhere, two)
    wait_for(lambda: owned <= local_keys(new), what="every key it owns on the newcomer")
    assert_readable(nodes, everywhere, two)  # the default quorum is still from = N = 3, ack = 2


def test_a_join_displaces_at_most_the_last_owner_of_a_key(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    """Each key written with from = 2 before a join reads through the two owners it has after it."""
    cluster = start_cluster(3, cluster_secret=SECRET)
    _, two = fill(cluster)
    new = newcomer(cluster, tmp_path)
    new.start()
    settled([*cluster.nodes, new], [*cluster.urls, new.url])
    before, after = Placement(cluster.urls), Placement([*cluster.urls, new.url])
    moved = [key for key in two if new.url in after.replicas_for(key.encode(), 2)]
    for key in moved:
        old, now = before.replicas_for(key.encode(), 2), after.replicas_for(key.encode(), 2)
        assert now in ([old[0], new.url], [new.url, old[0]])  # the second owner is the one displaced
    assert moved, "no key moved to the newcomer (the test needs some)"
    assert_readable([*cluster.nodes, new], [], two)


@pytest.mark.parametrize(
    "point", ["change:claimant-took", "change:stored", "settle:claimant-took", "settle:stored"]
)
def test_a_newcomer_killed_at_a_step_of_its_join_finishes_it_when_started_again(
    start_cluster: ClusterFactory, tmp_path: Path, point: str
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    everywhere, _ = fill(cluster)
    new = newcomer(cluster, tmp_path)
    if point.startswith("change"):
        start_crashing(crashing(new, point))  # it never served
    else:
        doomed = crashing(new, point)
        with contextlib.suppress(NodeStartError):
            doomed.start()  # it serves while it streams (if it streams long enough to be seen serving)
        assert doomed.process is not None and doomed.process.wait(60) == 137  # ended at its last step
    new.start()  # the same flags, without the crash
    nodes = [*cluster.nodes, new]
    settled(nodes, [*cluster.urls, new.url])
    assert owned_by(new.url, [*cluster.urls, new.url], everywhere) <= local_keys(new)
    assert_readable(nodes, everywhere)


def test_a_claimant_killed_as_it_takes_a_join_finishes_it_when_both_start_again(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    everywhere, _ = fill(cluster)
    claimant = cluster[0]
    doomed = restarted_to_crash(claimant, "adopt:stored")
    new = newcomer(cluster, tmp_path)
    with pytest.raises(NodeStartError, match="did not take the change"):
        new.start()  # the claimant died as it took the change: the newcomer cannot go on, and exits
    assert doomed.process is not None and doomed.process.wait(30) == 137
    claimant.start()  # it stored the change before it died: it comes back with it
    assert status_of(claimant)["joining"] == [new.url]
    new.start()  # the same node again
    nodes = [*cluster.nodes, new]
    settled(nodes, [*cluster.urls, new.url])
    assert owned_by(new.url, [*cluster.urls, new.url], everywhere) <= local_keys(new)


@pytest.mark.slow
def test_after_a_join_the_displaced_owners_drop_what_they_no_longer_own_once_its_owners_hold_it(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    """A node that no longer owns a key drops it after a grace period: here a 2 s grace
    period (the GC pass runs every second), after the membership settled."""
    cluster = start_cluster(3, cluster_secret=SECRET, gc_grace_s=2, hint_window_s=1)
    everywhere, two = fill(cluster)
    new = newcomer(cluster, tmp_path)
    new = Node(dataclasses.replace(new.config, gc_grace_s=2, hint_window_s=1), new.log_path)
    new.start()
    nodes = [*cluster.nodes, new]
    settled(nodes, [*cluster.urls, new.url])
    for node in cluster.nodes:
        holds_only_what_it_owns(node, owned_by(node.url, [*cluster.urls, new.url], everywhere, two))
    assert sum(total(scrape(node), "kvnode_gc_dropped_total", kind="unowned") for node in cluster.nodes) > 0
    assert_readable(nodes, everywhere, two)


def holds_only_what_it_owns(node: Node, owned: set[str]) -> None:
    wait_for(lambda: local_keys(node) == owned, seconds=60, what=f"{node.url} to drop what it does not own")


def membership_of(node: Node) -> dict[str, Any]:
    """The membership as ``GET /v0/cluster`` shows it: members, tokens, version, who joins or leaves."""
    view = json.loads(request(node.url, "GET", "/v0/cluster").body)
    return {name: view[name] for name in ("cluster", "tokens", "membership_version", "joining", "leaving")}


def test_a_join_on_a_port_in_use_exits_2_in_one_line_and_claims_nothing(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    before = [membership_of(node) for node in cluster]
    new = newcomer(cluster, tmp_path)
    with socket.create_server(("127.0.0.1", new.config.port)):  # another process's port
        stderr = assert_exit_2_with_one_line(run_node(new))
    assert (
        stderr.startswith(f"kvnode: cannot listen on {new.url}: ")
        and "address already in use" in stderr.lower()
    )
    assert [membership_of(node) for node in cluster] == before
    assert before[0]["membership_version"] == 1 and before[0]["joining"] == []
