"""How a node decides a peer is down, on real nodes (kvnode.replica.failure_detector): a replica whose event
loop is held for 1.5 s (SIGSTOP, then SIGCONT) keeps its channels, where a fixed one-second silence limit
dropped them; one frozen for good is convicted about two seconds after it was last heard from, and
kvnode_peer_phi shows the suspicion while a peer is connected."""

from __future__ import annotations

import re
import threading
import time

from tests.harness import ClusterFactory, Node, scrape, stats, wait_for

HOLD_S = 1.5  # within the default acceptable pause (1.5 s beyond the usual interval)


def log_lines(node: Node, pattern: str) -> list[str]:
    return re.findall(f".*{pattern}.*", node.log_path.read_text())


def channel_events(node: Node, peer: Node) -> list[str]:
    """The node's log lines that say its channel to ``peer`` connected or was dropped."""
    return log_lines(node, f"replica channel to {re.escape(peer.url)} (?:connected|dropped)")


def phi_of(node: Node, peer: Node) -> float:
    """``peer``'s phi as ``node``'s /metrics shows it (kvnode_peer_phi)."""
    ((_, value),) = [
        (labels, value)
        for (name, labels), value in scrape(node).items()
        if name == "kvnode_peer_phi" and ("peer", peer.url) in labels
    ]
    return value


def test_a_replica_held_for_a_moment_keeps_its_channels(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    coordinator, held = cluster[0], cluster[2]

    def all_connected() -> bool:
        return all(set(stats(node)["peers"].values()) == {"connected"} for node in cluster)

    wait_for(all_connected, what="every node connected to every peer")
    before = {(node.url, peer.url): channel_events(node, peer) for node in cluster for peer in cluster}
    held.freeze()
    release = threading.Timer(HOLD_S, held.resume)  # on time, however long a poll below takes
    release.start()
    states: set[str] = set()
    try:
        while release.is_alive():  # the coordinator's view while the replica is held
            states.add(stats(coordinator)["peers"][held.url])
    finally:
        release.join()
        held.resume()

    def answers_3_of_3() -> bool:
        return coordinator.put("after", b"v", ack=3, from_=3).status == 201

    wait_for(answers_3_of_3, what="a 3/3 write once the replica is released")
    assert states == {"connected"}, states
    # Neither the held replica's peers nor the held replica itself gave a channel up, or opened another.
    after = {(node.url, peer.url): channel_events(node, peer) for node in cluster for peer in cluster}
    assert after == before
    for node in cluster:
        assert not log_lines(node, "is silent"), node.url


def test_a_replica_frozen_for_good_is_found_in_about_two_seconds(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3)
    coordinator, frozen = cluster[0], cluster[2]
    assert coordinator.put("warm", b"v", ack=3, from_=3).status == 201
    assert phi_of(coordinator, frozen) < 1.0  # heard from at its usual pace: not lagging
    dropped = f"replica channel to {re.escape(frozen.url)} dropped"
    dropped_before = len(log_lines(coordinator, dropped))
    frozen.freeze()
    frozen_at = time.monotonic()
    try:
        wait_for(lambda: stats(coordinator)["peers"][frozen.url] == "suspect", seconds=10, what="suspect")
        found_after = time.monotonic() - frozen_at
        # Not before the acceptable pause; within about two seconds of the last answer, give or take a
        # heartbeat and this test's polling (a loaded machine makes both late).
        assert 1.5 <= found_after < 4.0, f"found after {found_after:.2f}s"
        (silent,) = log_lines(coordinator, dropped)[dropped_before:]
        verdict = re.search(r"is silent: no answer for (\d+\.\d)s \(phi (\d+\.\d)\)", silent)
        assert verdict is not None, silent
        assert float(verdict[1]) >= 1.5 and float(verdict[2]) >= 8.0, silent
        assert phi_of(coordinator, frozen) == 0.0  # not connected: no suspicion to show
        # Meanwhile the other two take writes.
        assert coordinator.put("while-frozen", b"v", ack=2, from_=3).status == 201
    finally:
        frozen.resume()
    wait_for(lambda: stats(coordinator)["peers"][frozen.url] == "connected", what="reconnected")


def test_the_acceptable_pause_is_a_flag(start_cluster: ClusterFactory) -> None:
    """With no acceptable pause, a frozen replica is convicted once it is quieter than its own pace
    explains: well before the default pause alone (1.5 s) has passed."""
    cluster = start_cluster(3, acceptable_pause_ms=0)
    coordinator, frozen = cluster[0], cluster[2]
    assert coordinator.put("warm", b"v", ack=3, from_=3).status == 201
    dropped = f"replica channel to {re.escape(frozen.url)} dropped"
    dropped_before = len(log_lines(coordinator, dropped))
    frozen.freeze()
    try:
        wait_for(lambda: stats(coordinator)["peers"][frozen.url] == "suspect", seconds=10, what="suspect")
    finally:
        frozen.resume()
    (silent,) = log_lines(coordinator, dropped)[dropped_before:]
    verdict = re.search(r"is silent: no answer for (\d+\.\d)s", silent)
    assert verdict is not None and float(verdict[1]) < 1.5, silent
