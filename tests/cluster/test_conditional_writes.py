"""Conditional writes on real nodes, checked by list-append (tests/list_append.py): clients append unique
tokens through serial reads and conditional writes while members are killed and restarted, paused,
partitioned (network namespaces), run with clock offsets within the maximum skew, join and leave; every
acknowledged append is in the final lists exactly once, none twice, each client's in its order. Plain and
conditional writes side by side on different keys. And the check is shown to fail: with the proposer's
classic defect planted (accepted proposals in promises ignored), it finds lost or duplicated appends."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from kvnode.ops.netns import run_ip
from tests.changes import newcomer, settled
from tests.harness import ClusterFactory, request, run_kvnode, wait_for
from tests.list_append import Appends, final_lists, http_send, problems, run_clients
from tests.namespaces import NODE_HOSTS, MultiHostCluster, hosts, member_per_host

KEYS = ["list-a", "list-b"]


def appending(urls: list[str], clients: int, per_client: int, seconds: float = 60.0) -> Future[Appends]:
    """The clients running in the background; the future holds what they did."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(run_clients, urls, KEYS, clients, per_client, seconds)
    finally:
        pool.shutdown(wait=False)


def progressed(appends_so_far: Callable[[], int], more_than: int) -> None:
    """Wait until the clients have made more than ``more_than`` attempts (faults land mid-run)."""
    wait_for(lambda: appends_so_far() > more_than, seconds=60, what=f"more than {more_than} attempts")


def assert_valid(appends: Appends, urls: list[str], least: int) -> None:
    lists = final_lists(http_send, urls, KEYS)
    found = problems(appends, lists)
    acknowledged = sum(len(tokens) for tokens in appends.acknowledged.values())
    assert found == [], (found, appends.outcomes)
    assert acknowledged >= least, (acknowledged, appends.outcomes)


def attempts_of(urls: list[str]) -> Callable[[], int]:
    """The conditional writes the cluster's nodes have coordinated so far, from their /v0/stats."""

    def count() -> int:
        total = 0
        for url in urls:
            try:
                answer = request(url, "GET", "/v0/stats", timeout=2.0)
            except OSError:
                continue  # a member killed or paused meanwhile
            if answer.status == 200:
                rounds = json.loads(answer.body)["paxos"]["rounds"]
                total += rounds["applied"] + rounds["not_applied"] + rounds["unknown"]
        return total

    return count


def test_appends_on_three_members_through_a_kill_and_a_pause(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    urls = [node.url for node in cluster]
    started = attempts_of(urls)
    running = appending(urls, clients=6, per_client=12)
    progressed(started, 10)
    cluster[1].kill()  # kill -9
    progressed(started, 30)
    cluster[1].start()
    progressed(started, 45)
    cluster[2].freeze()  # SIGSTOP: a slow peer is not a dead one
    time.sleep(1.5)  # the fault's length, not a synchronisation: the clients go on meanwhile
    cluster[2].resume()
    appends = running.result(timeout=120)
    assert_valid(appends, urls, least=60)


def test_appends_on_five_members_with_clocks_apart_and_plain_writes_beside(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(5, clock_offsets_ms=[0, 2000, -2000, 1500, -1500])  # within the 5 s skew
    urls = [node.url for node in cluster]
    stop = threading.Event()
    plain: list[str] = []

    def write_plain() -> None:
        count = 0
        while not stop.is_set() and count < 2000:
            key = f"plain-{count}"
            count += 1
            if cluster[count % 5].put(key, key.encode()).status == 201:
                plain.append(key)

    writer = threading.Thread(target=write_plain, daemon=True)
    writer.start()
    try:
        appends = run_clients(urls, KEYS, 5, 12, 60.0)
    finally:
        stop.set()
        writer.join(30)
    assert_valid(appends, urls, least=60)
    assert plain and all(cluster[0].get(key).body == key.encode() for key in plain[-20:])


def test_appends_across_a_join_and_a_leave(start_cluster: ClusterFactory, tmp_path: Path) -> None:
    cluster = start_cluster(3, cluster_secret="conditional-writes-secret" * 2)
    urls = [node.url for node in cluster]
    started = attempts_of(urls)
    running = appending(urls, clients=4, per_client=15)
    progressed(started, 10)
    joining = newcomer(cluster, tmp_path)
    joining.start()
    settled([*cluster.nodes, joining], [*urls, joining.url])
    progressed(started, 30)
    leave = run_kvnode(["admin", "--url", urls[0], "leave", urls[2], "--wait"], tmp_path)
    assert leave.returncode == 0, leave.stderr
    appends = running.result(timeout=120)
    assert_valid(appends, [urls[0], urls[1], joining.url], least=40)


def test_appends_with_a_member_partitioned_away(tmp_path: Path) -> None:
    roles = {f"n{host_part}": host_part for host_part in NODE_HOSTS}
    with hosts(roles) as (network, client):
        nodes = member_per_host(network, roles, tmp_path)
        with MultiHostCluster(client, nodes).running():
            urls = [node.url for node in nodes]
            bridge = network.bridges_namespace

            def partitioned_run() -> Appends:
                with ThreadPoolExecutor(1) as pool:
                    running = pool.submit(run_clients, urls, KEYS, 4, 10, 25.0)
                    time.sleep(1.0)  # the fault's start, not a synchronisation
                    run_ip("-n", bridge, "link", "set", "vn3", "down")  # n3 cut off from everyone
                    time.sleep(3.0)
                    run_ip("-n", bridge, "link", "set", "vn3", "up")
                    return running.result(timeout=60)

            appends = client.run(partitioned_run)
            lists = client.run(final_lists, http_send, urls, KEYS)
        found = problems(appends, lists)
        assert found == [], (found, appends.outcomes)
        assert sum(len(tokens) for tokens in appends.acknowledged.values()) >= 20, appends.outcomes


@pytest.mark.parametrize("defect", ["", "ignore-accepted"])
def test_eight_clients_on_one_key_and_the_check_fails_on_a_planted_defect(
    start_cluster: ClusterFactory, defect: str
) -> None:
    """Eight clients contending on one key: a proposal accepted and not yet committed is common. Sound,
    nothing is lost; with the proposer's classic defect planted (--paxos-defect ignore-accepted: a round
    that finds such a proposal overwrites it instead of completing it), acknowledged appends are."""
    cluster = start_cluster(3, paxos_defect=defect)
    urls = [node.url for node in cluster]
    appends = run_clients(urls, KEYS[:1], 8, 10, 30.0)
    found = problems(appends, final_lists(http_send, urls, KEYS[:1]))
    if not defect:
        assert found == [], (found, appends.outcomes)
    else:
        assert any(problem.endswith((" lost", " twice")) for problem in found), found
