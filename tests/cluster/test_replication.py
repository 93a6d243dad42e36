"""Convergence on real clusters: a restarted peer is used at once, writes reach every replica, the hybrid
clock orders writes across skewed clocks (and refuses a record beyond the maximum skew), hinted handoff
and read repair bring stale replicas up to date, a silent peer is found by heartbeat."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

import pytest

from kvnode.config import FanoutMode
from kvnode.replica.errors import ReplicaSkewRefused
from kvnode.replica.peer import PeerReplica
from kvnode.storage.records import Record
from tests.harness import (
    FANOUTS,
    Cluster,
    ClusterFactory,
    Node,
    fresh_key,
    key_where,
    listed_on,
    stats,
    wait_for,
)


def stop_and_see_gone(replica: Node, coordinator: Node) -> None:
    """Stop replica and wait until coordinator has seen its channel close, so that the next write finds
    it not connected: the coordinator then keeps that write's hint before it answers."""
    replica.stop()
    wait_for(lambda: stats(coordinator)["peers"][replica.url] != "connected", what="the channel closed")


def ignored_a_timestamp(node: Node) -> bool:
    """Whether node's clock has ignored a timestamp beyond the maximum skew (what a refusal does)."""
    return bool(stats(node)["clock"]["ignored_ahead"] >= 1)


def lists(node: Node, key: str, expected: bytes | None) -> bool:
    return listed_on(node, key) == expected


def held_everywhere(cluster: Cluster, key: str, expected: bytes | None) -> bool:
    """Whether every node's own listing has key with value expected (None: no live record)."""
    return all(lists(node, key, expected) for node in cluster)


# --- a restarted peer is used by the very next request ------------------------------------------------


@pytest.mark.parametrize("through", ["other", "restarted"])
@pytest.mark.parametrize("fanout", FANOUTS)
def test_a_restarted_peer_serves_the_very_next_request(
    start_cluster: ClusterFactory, fanout: FanoutMode, through: str
) -> None:
    cluster = start_cluster(2, fanout=fanout)
    other, restarted = cluster[0], cluster[1]
    assert other.put("before", b"v", ack=2, from_=2).status == 201  # the channels are up
    for round_ in range(3):
        restarted.stop()
        restarted.start()  # returns as soon as /v0/status answers: no pause before the request
        coordinator = other if through == "other" else restarted
        key = f"restart-{round_}"
        assert coordinator.put(key, b"v%d" % round_, ack=2, from_=2).status == 201
        assert coordinator.get(key, ack=2, from_=2).body == b"v%d" % round_
        assert coordinator.delete(key, ack=2, from_=2).status == 202


# --- every write reaches every replica ------------------------------------------------------------------


@pytest.mark.parametrize("fanout", FANOUTS)
def test_put_and_delete_with_ack_2_reach_all_3_replicas(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    cluster = start_cluster(3, fanout=fanout)
    keys = [fresh_key(f"everywhere-{fanout}") for _ in range(6)]
    for index, key in enumerate(keys):
        assert cluster[index % 3].put(key, key.encode(), ack=2, from_=3).status == 201
    for key in keys:
        wait_for(partial(held_everywhere, cluster, key, key.encode()), what=f"{key} on every node")
    for index, key in enumerate(keys):
        assert cluster[(index + 1) % 3].delete(key, ack=2, from_=3).status == 202
    for key in keys:
        wait_for(partial(held_everywhere, cluster, key, None), what=f"{key} deleted on every node")


# --- the hybrid logical clock ----------------------------------------------------------------------------


@pytest.mark.parametrize("fanout", FANOUTS)
def test_sequential_writes_through_skewed_coordinators_keep_the_last_acknowledged(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    """Offsets of -1000/0/+1000 ms: a write that starts after another was acknowledged wins, whichever
    node coordinates either; readable at once with the default quorum, and alone once converged."""
    cluster = start_cluster(3, fanout=fanout, clock_offsets_ms=[-1000, 0, 1000])
    key = fresh_key("skew")
    # Alternate coordinators so that every write follows one stamped by a clock up to 2 s ahead.
    order = [2, 0, 1, 0, 2, 1, 0, 2]
    last: bytes | None = None
    for step, index in enumerate(order):
        coordinator = cluster[index]
        if step % 3 == 2:
            assert coordinator.delete(key).status == 202
            last = None
        else:
            last = b"value-%d" % step
            assert coordinator.put(key, last).status == 201
        for node in cluster:  # the default quorum sees the last acknowledged write at once
            answer = node.get(key)
            assert (answer.status, answer.body if last else None) == ((200, last) if last else (404, None))
    # Every replica holds it once hints and repair have run; then ack=1 reads agree everywhere.
    wait_for(partial(held_everywhere, cluster, key, last), what="the replicas converged")
    for node in cluster:
        answer = node.get(key, ack=1)
        assert (answer.status, answer.body if last else None) == ((200, last) if last else (404, None))


def test_a_node_beyond_the_maximum_skew_stores_nothing_and_moves_no_clock(
    start_cluster: ClusterFactory,
) -> None:
    """The third node runs 9 s ahead (max skew 5 s): its clock is fenced, so its write is refused before
    anything is stamped (tests/cluster/test_clock_fencing.py has the whole story)."""
    cluster = start_cluster(3, clock_offsets_ms=[0, 0, 9000])
    fast = cluster[2]
    key = fresh_key("future")
    answer = fast.put(key, b"from-the-future", ack=3, from_=3)
    assert answer.status == 503, answer.body
    assert b"9.0 s ahead" in answer.body, answer.body
    for node in cluster:
        assert listed_on(node, key) is None  # refused, not stored
    for node in (cluster[0], cluster[1]):
        assert stats(node)["clock"]["lead_ms"] < 1000  # not dragged 9 s ahead
    assert stats(fast)["hints"]["pending"] == {}  # nothing hinted either


def test_a_replica_refuses_a_record_stamped_beyond_the_maximum_skew(start_cluster: ClusterFactory) -> None:
    node = start_cluster(1)[0]

    async def write_from_the_future() -> BaseException | int | None:
        peer = PeerReplica(node.url, 2.0)
        try:
            ahead = Record.put(time.time_ns() // 1000 + 9_000_000, b"from-the-future")
            [outcome] = await asyncio.gather(peer.write(b"future", ahead), return_exceptions=True)
            return outcome
        finally:
            await peer.close()

    assert isinstance(asyncio.run(write_from_the_future()), ReplicaSkewRefused)
    assert listed_on(node, "future") is None
    assert ignored_a_timestamp(node) is False  # refused before the clock saw it


# --- hinted handoff --------------------------------------------------------------------------------------


@pytest.mark.parametrize("restart", ["stop", "kill"])
def test_hints_survive_a_coordinator_restart_and_reach_the_replica(
    start_cluster: ClusterFactory, restart: str
) -> None:
    cluster = start_cluster(3)
    coordinator, replica, third = cluster[0], cluster[1], cluster[2]
    deleted, written = fresh_key("hinted-delete"), fresh_key("hinted-put")
    assert coordinator.put(deleted, b"old", ack=3, from_=3).status == 201
    stop_and_see_gone(replica, coordinator)
    assert coordinator.put(written, b"missed", ack=2, from_=3).status == 201
    assert coordinator.delete(deleted, ack=2, from_=3).status == 202
    if restart == "kill":
        coordinator.kill()
    else:
        coordinator.stop()
    coordinator.start()
    replica.start()
    # Nobody touches the keys: the restarted coordinator delivers its hints by itself.
    wait_for(lambda: listed_on(replica, written) == b"missed", what="the hinted put")
    wait_for(lambda: listed_on(replica, deleted) is None, what="the hinted delete")
    wait_for(lambda: stats(coordinator)["hints"]["pending"] == {}, what="no hints left")
    coordinator.stop()
    third.stop()
    assert replica.get(written, ack=1, from_=3).body == b"missed"  # served by the replica alone
    assert replica.get(deleted, ack=1, from_=3).status == 404


def test_the_hint_window_bounds_new_hints_and_drops_old_ones(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, hint_window_s=1)
    coordinator, replica = cluster[0], cluster[1]
    early, late = fresh_key("early"), fresh_key("late")
    assert coordinator.put(fresh_key("warm-up"), b"w", ack=3).status == 201
    stop_and_see_gone(replica, coordinator)
    assert coordinator.put(early, b"e", ack=2, from_=3).status == 201  # hinted
    assert stats(coordinator)["hints"]["pending"] == {replica.url: 1}
    time.sleep(1.5)  # the subject of the test: the replica stays down longer than the window
    assert coordinator.put(late, b"l", ack=2, from_=3).status == 201  # down too long: no hint
    assert stats(coordinator)["hints"]["dropped"].get("window") == 1
    replica.start()
    wait_for(lambda: stats(coordinator)["hints"]["pending"] == {}, what="the old hint dropped")
    assert stats(coordinator)["hints"]["dropped"].get("expired") == 1
    assert listed_on(replica, early) is None and listed_on(replica, late) is None


def test_the_healthy_path_writes_no_hint(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    for node in cluster:  # connect every channel: a write to a peer not yet connected is hinted first
        assert node.put(fresh_key("warm-up"), b"v", ack=3).status == 201
    kept = [stats(node)["hints"]["kept"] for node in cluster]
    for index in range(30):
        assert cluster[index % 3].put(fresh_key("healthy"), b"v").status == 201
        assert cluster[index % 3].delete(fresh_key("healthy")).status == 202
    assert [stats(node)["hints"]["kept"] for node in cluster] == kept


# --- read repair -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fanout", FANOUTS)
def test_one_quorum_read_repairs_a_stale_replica(start_cluster: ClusterFactory, fanout: FanoutMode) -> None:
    cluster = start_cluster(3, fanout=fanout)
    stale = cluster[2]
    for deleting, expected in ((False, b"new"), (True, None)):
        # A key whose third replica is not among the first two, so a from=2 write leaves it stale
        # without any hint (it was never one of that write's replicas).
        key = key_where(cluster.urls, "stale", lambda order: order[2] == stale.url)
        assert cluster[0].put(key, b"old", ack=3, from_=3).status == 201
        if deleting:
            assert cluster[0].delete(key, ack=2, from_=2).status == 202
        else:
            assert cluster[0].put(key, b"new", ack=2, from_=2).status == 201
        assert listed_on(stale, key) == b"old"
        # sync and speculative reads ask only ack replicas, so they reach the third only with ack=3
        answer = cluster[1].get(key, ack=2 if fanout == "async" else 3, from_=3)
        assert answer.status == (404 if deleting else 200)
        wait_for(partial(lists, stale, key, expected), what="repair")


def test_read_repair_does_not_delay_the_answer(start_cluster: ClusterFactory) -> None:
    """The stale replica is frozen during the read: the answer comes from the other two, and the stale
    replica's late answer, once it resumes, still triggers its repair."""
    cluster = start_cluster(3, timeout_ms=5000)
    stale = cluster[2]
    key = key_where(cluster.urls, "slow-stale", lambda order: order[2] == stale.url)
    assert cluster[0].put(key, b"old", ack=3, from_=3).status == 201
    assert cluster[0].put(key, b"new", ack=2, from_=2).status == 201
    stale.freeze()
    try:
        started = time.monotonic()
        answer = cluster[0].get(key)  # ack=2 of 3: asks the frozen one too
        elapsed = time.monotonic() - started
    finally:
        stale.resume()
    assert answer.body == b"new"
    assert elapsed < 2.0, f"the answer waited {elapsed:.2f}s for the frozen replica (timeout 5 s)"
    wait_for(lambda: listed_on(stale, key) == b"new", what="the late stale answer repaired")
    assert stats(cluster[0])["coordinator"]["read_repairs"] >= 1


# --- a silent peer ---------------------------------------------------------------------------------------


@pytest.fixture
def load_thread() -> Iterator[Callable[[Node, float], list[int]]]:
    """load(node, seconds) runs default-quorum PUT/GET pairs through node in a background thread and
    returns the list that collects every status; the thread is joined when the test ends."""
    threads: list[threading.Thread] = []
    stop = threading.Event()

    def load(node: Node, seconds: float) -> list[int]:
        statuses: list[int] = []

        def run() -> None:
            deadline = time.monotonic() + seconds
            step = 0
            while time.monotonic() < deadline and not stop.is_set():
                key = f"silent-{step % 50}"
                statuses.append(node.put(key, b"v%d" % step).status)
                statuses.append(node.get(key).status)
                step += 1

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return statuses

    yield load
    stop.set()
    for thread in threads:
        thread.join(30)


def test_a_silent_peer_is_found_by_heartbeat_and_used_again_after_it_resumes(
    start_cluster: ClusterFactory, load_thread: Callable[[Node, float], list[int]]
) -> None:
    cluster = start_cluster(3, timeout_ms=1000)
    coordinator, silent = cluster[0], cluster[2]
    assert coordinator.put("warm", b"v", ack=3, from_=3).status == 201
    silent.freeze()
    try:
        wait_for(lambda: stats(coordinator)["peers"][silent.url] == "suspect", seconds=10, what="suspect")
        statuses = load_thread(coordinator, 2.0)  # while it is suspect: ack=2 of the other two
        wait_for(lambda: len(statuses) > 20, what="load under way")
    finally:
        silent.resume()
    wait_for(lambda: stats(coordinator)["peers"][silent.url] == "connected", seconds=10, what="reconnected")
    assert coordinator.put("after", b"v", ack=3, from_=3).status == 201
    assert set(statuses) <= {200, 201}, sorted(set(statuses))
