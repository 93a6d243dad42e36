"""A claimed join that never comes, undone (kvnode.cluster.join_watcher, kvnode.cluster.changes.undo_join),
with real nodes: a newcomer killed as ``kill -9`` would once its claim was taken and before it streamed
anything (crash point ``change:stored``) leaves the cluster with a member joining, which refuses every
other change; the claimant undoes it once it has not answered for ``--join-timeout-s``, or ``admin
remove`` does at once. Either way
the membership is back to the three members (a new version every node runs with), a new join succeeds,
and no write acknowledged meanwhile, under a writer, is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.changes import (
    SECRET,
    Writer,
    assert_readable,
    crashing,
    fill,
    newcomer,
    settled,
    start_crashing,
    status_of,
    until_status,
)
from tests.harness import Cluster, ClusterFactory, Node, run_kvnode, wait_for


def admin(node: Node, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = run_kvnode(["admin", "--url", node.url, *args], tmp_path)
    return result.returncode, result.stdout, result.stderr


def claim_and_die(cluster: Cluster, tmp_path: Path) -> Node:
    """A newcomer that claims a join (the claimant took it and it stored it) and is killed before it
    offered it to the others or took any part: the join that never comes."""
    doomed = crashing(newcomer(cluster, tmp_path, name="doomed"), "change:stored")
    start_crashing(doomed)
    return doomed


def writes_go_on(writer: Writer, more: int = 50) -> None:
    """Wait for ``more`` writes acknowledged (early in a writer's life: it stops after 5,000)."""
    already = len(writer.acknowledged)
    wait_for(lambda: len(writer.acknowledged) >= already + more, seconds=60, what=f"{more} more writes")


def join_again(cluster: Cluster, tmp_path: Path) -> tuple[list[Node], list[str]]:
    """A new join, once one was undone, under a writer: it succeeds; every node, and the writes."""
    with Writer(cluster[1], "rejoin") as writer:
        writes_go_on(writer)
        new = newcomer(cluster, tmp_path, name="second")
        new.start()  # a change may start again
        nodes = [*cluster.nodes, new]
        settled(nodes, [*cluster.urls, new.url])
    return nodes, writer.acknowledged


@pytest.mark.slow
def test_a_join_whose_member_died_before_it_streamed_is_undone_after_the_timeout(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET, join_timeout_s=5)
    everywhere, two = fill(cluster)
    with Writer(cluster[1], "stuck") as writer:
        writes_go_on(writer)
        doomed = claim_and_die(cluster, tmp_path)
        writes_go_on(writer)  # while it joins (or once undone already, on a slow machine)
        settled(cluster.nodes, cluster.urls)  # undone: back to the three, none joining
    assert [status_of(node)["membership_version"] for node in cluster] == [3] * 3  # claimed, undone
    code, shown, _ = admin(cluster[0], tmp_path, "status")
    assert code == 0 and f"join of {doomed.url} undone: no progress for " in shown, shown
    nodes, rejoin = join_again(cluster, tmp_path)
    assert_readable(nodes, everywhere, two)
    # A quorum read through one node finds each of them.
    assert_readable([nodes[-1]], writer.acknowledged + rejoin)


def test_admin_remove_undoes_a_join_that_will_never_come_at_once(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)  # the default join timeout: minutes
    everywhere, two = fill(cluster)
    with Writer(cluster[1], "stuck") as writer:
        doomed = claim_and_die(cluster, tmp_path)
        for node in cluster:
            until_status(node, lambda status: status["joining"] == [doomed.url], "the claim")
        writes_go_on(writer)  # writes go on meanwhile (to the present owners, the joiner's hinted)
        code, _, refused = admin(cluster[0], tmp_path, "leave", cluster.urls[2])
        assert code == 1 and "one change at a time" in refused  # stuck until the join is undone

        code, _, refused = admin(cluster[1], tmp_path, "remove", cluster.urls[2])
        assert (code, refused.count("\n")) == (1, 1) and "admin leave removes it" in refused, refused
        code, _, refused = admin(cluster[1], tmp_path, "remove", "http://127.0.0.1:9")
        assert (code, refused.count("\n")) == (1, 1) and "is not a member" in refused, refused
        code, shown, _ = admin(cluster[1], tmp_path, "remove", doomed.url)
        assert code == 0 and shown == (
            f"join of {doomed.url} undone (membership version 3): the members are {','.join(cluster.urls)} "
            "again\n"
        )
        settled(cluster.nodes, cluster.urls)
    code, shown, _ = admin(cluster[1], tmp_path, "status")
    assert f"join of {doomed.url} undone: removed by the operator (membership version 3)" in shown
    nodes, rejoin = join_again(cluster, tmp_path)
    assert_readable(nodes, everywhere, two)
    assert_readable([nodes[-1]], writer.acknowledged + rejoin)
