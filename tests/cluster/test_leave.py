"""A member leaving a running cluster (``admin leave MEMBER``), with real nodes: writes go to the present
and the next owners of a key while reads stay on the present ones, the member sends every record it holds
to their next owners, then removes itself; no acknowledged write is lost on the way, under a writer, nor
when a node taking part is killed at a step of the change."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvnode.ops.processes import NodeStartError
from kvnode.topology.placement import Placement
from tests.changes import (
    SECRET,
    Writer,
    assert_readable,
    fill,
    local_keys,
    restarted_to_crash,
    status_of,
    until_status,
)
from tests.harness import Cluster, ClusterFactory, Node, run_kvnode, wait_for


def admin_leave(cluster: Cluster, member: Node, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    result = run_kvnode(["admin", "--url", cluster[0].url, "leave", member.url, *extra], tmp_path)
    return result.returncode, result.stdout, result.stderr


def gone(nodes: list[Node], member: str) -> None:
    for node in nodes:
        until_status(node, lambda status: member not in status["cluster"], f"without {member}")


def holds_what_it_owns(nodes: list[Node], everywhere: list[str], two: list[str]) -> None:
    """Every remaining member holds every key it owns, with no client reading first (a read repairs)."""
    after = Placement([node.url for node in nodes])
    for node in nodes:
        owned = set(everywhere) | {key for key in two if node.url in after.replicas_for(key.encode(), 2)}
        missing = owned - local_keys(node)
        assert not missing, f"{node.url} lacks {len(missing)} keys it owns: {sorted(missing)[:5]}"


def test_a_member_leaves_under_writes_without_losing_an_acknowledged_one(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(4, cluster_secret=SECRET)
    everywhere, two = fill(cluster)
    leaving = cluster[3]
    with Writer(cluster[0], "during") as writer:
        wait_for(lambda: len(writer.acknowledged) >= 50, what="writes acknowledged before the leave")
        status, out, err = admin_leave(cluster, leaving, tmp_path, "--wait")
        assert status == 0, err
        assert out.startswith(f"{leaving.url} left (membership version 3, ") and "it can be stopped" in out
        wait_for(lambda: len(writer.acknowledged) >= 100, what="writes acknowledged after it")
    remaining = list(cluster.nodes[:3])
    gone(remaining, leaving.url)
    leaving.stop()
    # Started again as the README restarts a member (no --cluster): refused in one line saying it left,
    # with no warning of a --cluster that differs before it.
    again = Node(dataclasses.replace(leaving.config, cluster=()), tmp_path / "again.log")
    with pytest.raises(NodeStartError) as refused:
        again.start()
    assert refused.value.reason == (
        f"kvnode: {leaving.url} left the cluster (or its join was undone) in membership version 3: the data "
        f"dir {leaving.config.data_dir} is no longer a member's; to serve again, join with --join SEED_URL "
        "and a new --data-dir (or this one wiped)"
    )
    assert "WARNING" not in again.log_path.read_text()
    # Written with the default from (every member, 4 then 3): every remaining member holds them.
    everywhere += writer.acknowledged
    wait_for(lambda: set(everywhere) <= local_keys(remaining[2]), what="the last writes' copies")
    holds_what_it_owns(remaining, everywhere, two)
    assert_readable(remaining, everywhere, two)


def test_a_leave_is_refused_in_one_line_when_it_cannot_be_made(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    # A leave is under way for at least twice the replica timeout (writes started before it drain): 10 s.
    cluster = start_cluster(3, cluster_secret=SECRET, timeout_ms=5_000)
    status, _, err = admin_leave(cluster, cluster[1], tmp_path)
    assert status == 0, err
    status, _, err = admin_leave(cluster, cluster[2], tmp_path)
    assert status == 1 and err.count("\n") == 1, err
    assert f"a change is under way: {cluster[1].url} is leaving; one change at a time" in err
    # Meanwhile the operator sees it: the member leaving, and each member's share before and after.
    shown = run_kvnode(["admin", "--url", cluster[0].url, "status"], tmp_path).stdout
    assert f"membership version 2: {cluster[1].url} is leaving" in shown, shown
    ring = json.loads(run_kvnode(["admin", "--url", cluster[0].url, "ring", "--json"], tmp_path).stdout)
    shares = {
        member["url"]: (member["share_before"], member["first_replica_share"]) for member in ring["members"]
    }
    assert shares[cluster[1].url][0] > 0.2 and shares[cluster[1].url][1] == 0, shares
    assert abs(sum(after for _, after in shares.values()) - 1) < 1e-6
    result = run_kvnode(["admin", "--url", cluster[0].url, "leave", "http://127.0.0.1:9"], tmp_path)
    assert result.returncode == 1 and "http://127.0.0.1:9 is not a member" in result.stderr
    gone([cluster[0], cluster[2]], cluster[1].url)
    other = start_cluster(3, cluster_secret=SECRET)
    other[2].stop()
    status, _, err = admin_leave(other, other[1], tmp_path)
    assert status == 1 and err.count("\n") == 1, err
    assert f"a leave needs every member; unreachable: {other[2].url}" in err


def test_a_member_killed_as_it_leaves_finishes_leaving_when_started_again(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(4, cluster_secret=SECRET)
    everywhere, two = fill(cluster)
    leaving = cluster[3]
    doomed = restarted_to_crash(leaving, "leave:streamed")
    status, _, err = admin_leave(cluster, leaving, tmp_path)
    assert status == 0, err
    assert doomed.process is not None and doomed.process.wait(60) == 137  # it streamed, and died
    assert leaving.url in status_of(cluster[0])["cluster"]  # still a member: it had not removed itself
    leaving.start()  # it stored that it leaves: it streams again, then removes itself
    remaining = list(cluster.nodes[:3])
    gone(remaining, leaving.url)
    leaving.stop()
    holds_what_it_owns(remaining, everywhere, two)


def test_the_node_driving_a_leave_killed_as_it_takes_it_lets_it_finish_when_started_again(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(4, cluster_secret=SECRET)
    everywhere, two = fill(cluster)
    driver = cluster[0]  # the claimant too: the first member in the cluster's order
    doomed = restarted_to_crash(driver, "adopt:stored")
    status, _, err = admin_leave(cluster, cluster[3], tmp_path)
    assert status != 0, err  # it died answering
    assert doomed.process is not None and doomed.process.wait(30) == 137
    driver.start()  # it stored the change before it died: it passes it on, and the member leaves
    remaining = list(cluster.nodes[:3])
    gone(remaining, cluster[3].url)
    cluster[3].stop()
    holds_what_it_owns(remaining, everywhere, two)
