"""Replacing a member that is down for good (``node --join SEED --replace MEMBER``), with real nodes: the
newcomer takes the member's place in placement, every member moves to the new membership, the newcomer
rebuilds what it owns, and no acknowledged write is lost on the way, under a writer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvnode.ops.flags import SECRET_ENV
from kvnode.ops.ports import free_ports
from kvnode.topology.placement import Placement
from tests.changes import (
    SECRET,
    Writer,
    assert_readable,
    crashing,
    fill,
    local_keys,
    newcomer,
    restarted_to_crash,
    run_node,
    start_crashing,
    status_of,
    until_status,
    versions,
)
from tests.harness import ClusterFactory, Node, assert_exit_2_with_one_line, clean_env, run_kvnode, wait_for


@pytest.mark.slow
def test_a_member_down_for_good_is_replaced_without_losing_an_acknowledged_write(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    before, _ = fill(cluster)
    dead = cluster[2]
    dead.kill()  # for good: its data dir is never used again
    new = newcomer(cluster, tmp_path, dead.url)
    with Writer(cluster[0], "during") as writer:
        wait_for(lambda: len(writer.acknowledged) >= 50, what="writes acknowledged with a member down")
        new.start()
        wait_for(lambda: status_of(new)["data"] == "serving", what="the newcomer rebuilt")
        wait_for(lambda: len(writer.acknowledged) >= 100, what="writes acknowledged after the change")
    members = [cluster[0].url, cluster[1].url, new.url]  # the newcomer in the dead member's place
    survivors = [cluster[0], cluster[1], new]
    for node in survivors:
        until_status(node, lambda status: status["membership_version"] == 2, "at version 2")
        assert status_of(node)["cluster"] == members
    acknowledged = before + writer.acknowledged
    # The newcomer holds every key itself (with from = 3 every member holds every key), before any client
    # reads one (a read would repair it).
    wait_for(lambda: set(acknowledged) <= local_keys(new), what="every acknowledged key on the newcomer")
    for node in survivors:
        missing = [key for key in acknowledged if node.get(key).body != key.encode()]
        assert not missing, f"{len(missing)} acknowledged keys do not read through {node.url}: {missing[:5]}"
    # It took the dead member's place: every key has the same replicas but for that one.
    old, now = Placement([node.url for node in cluster]), Placement(members, [node.url for node in cluster])
    for key in acknowledged[:200]:
        assert now.order(key.encode()) == [
            new.url if url == dead.url else url for url in old.order(key.encode())
        ]


def test_a_replace_is_refused_in_one_line_when_it_cannot_be_made(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    env = clean_env(**{SECRET_ENV: SECRET})

    def replace(member: str) -> str:
        [port] = free_ports(1)
        args = ["node", "--port", str(port), "--data-dir", str(tmp_path / f"r-{port}")]
        return assert_exit_2_with_one_line(
            run_kvnode([*args, "--join", cluster[0].url, "--replace", member], tmp_path, env)
        )

    assert "answers: a member that is up is not replaced; stop it first" in replace(cluster[2].url)
    assert "is not a member" in replace("http://127.0.0.1:9")
    cluster[2].stop()
    cluster[1].stop()
    assert f"a replace needs every other member; unreachable: {cluster[1].url}" in replace(cluster[2].url)
    cluster[1].start()
    replace_only = ["node", "--port", "9", "--data-dir", str(tmp_path / "x"), "--replace", cluster[2].url]
    wrong = assert_exit_2_with_one_line(run_kvnode(replace_only, tmp_path, env))
    assert "--replace takes --join SEED_URL" in wrong
    assert status_of(cluster[0])["membership_version"] == 1  # nothing changed


def test_a_newcomer_killed_while_it_rebuilds_finishes_when_started_again(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET, repair_rate=20)
    keys = [f"k-{i}" for i in range(100)]
    for key in keys:
        assert cluster[0].put(key, key.encode(), ack=3).status == 201
    dead = cluster[2]
    dead.kill()
    slow = newcomer(cluster, tmp_path, dead.url)
    new = Node(dataclasses.replace(slow.config, repair_rate=20), slow.log_path)
    new.start()
    assert status_of(new)["data"] == "rebuilding"
    new.kill()  # at 20 records a second its 100 keys take 5 s
    new.start()  # the same flags: it is a member now, and its data dir says it rebuilds
    assert status_of(new)["membership_version"] == 2
    wait_for(lambda: status_of(new)["data"] == "serving", what="the newcomer rebuilt after its restart")
    missing = set(keys) - local_keys(new)
    assert not missing, f"{len(missing)} keys missing on the newcomer"
    assert "ignored" in new.log_path.read_text()


@pytest.mark.parametrize("point", ["change:claimant-took", "change:stored"])
def test_a_newcomer_killed_during_the_change_completes_it_when_started_again(
    start_cluster: ClusterFactory, tmp_path: Path, point: str
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    keys, _ = fill(cluster)
    cluster[2].kill()
    new = newcomer(cluster, tmp_path, cluster[2].url)
    start_crashing(crashing(new, point))
    # The claimant (the first other member) took the change, and passes it on to the other member.
    wait_for(lambda: versions([cluster[0], cluster[1]]) == [2, 2], what="the change passed on")
    new.start()  # the same flags, without the crash
    members = [cluster[0].url, cluster[1].url, new.url]
    for node in (cluster[0], cluster[1], new):
        until_status(node, lambda status: status["cluster"] == members, "moved on")
    wait_for(lambda: status_of(new)["data"] == "serving", what="the newcomer rebuilt")
    assert set(keys) <= local_keys(new)
    assert_readable([cluster[0], cluster[1], new], keys)


def test_a_claimant_killed_as_it_takes_the_change_finishes_it_when_both_start_again(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, cluster_secret=SECRET)
    keys, _ = fill(cluster)
    cluster[2].kill()
    claimant = cluster[0]
    doomed = restarted_to_crash(claimant, "adopt:stored")
    new = newcomer(cluster, tmp_path, cluster[2].url)
    refused = assert_exit_2_with_one_line(run_node(new))
    assert f"the claimant {claimant.url} did not take the change" in refused
    assert doomed.process is not None and doomed.process.wait(30) == 137
    claimant.start()  # it stored the change before it died: it comes back with it
    assert status_of(claimant)["cluster"] == [claimant.url, cluster[1].url, new.url]
    new.start()
    members = [claimant.url, cluster[1].url, new.url]
    for node in (claimant, cluster[1], new):
        until_status(node, lambda status: status["cluster"] == members, "moved on")
    wait_for(lambda: status_of(new)["data"] == "serving", what="the newcomer rebuilt")
    assert set(keys) <= local_keys(new)
