"""Speculative reads on a real cluster: a slow replica costs a read the speculative delay, not the timeout."""

from __future__ import annotations

import time

from kvnode.placement import Placement
from tests.conftest import ClusterFactory
from tests.test_cluster import fresh_key

TIMEOUT_MS = 3000
CEILING_MS = 50


def test_a_frozen_replica_costs_a_speculative_read_about_the_delay_not_the_timeout(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, fanout="speculative", timeout_ms=TIMEOUT_MS, speculative_ceiling_ms=CEILING_MS)
    coordinator, slow = cluster[0], cluster[2]
    placement = Placement(cluster.urls)
    # Keys whose first replica after the coordinator's own is the one that will be slow: a speculative
    # read with ack=2 asks the coordinator itself and that one first.
    keys: list[str] = []
    while len(keys) < 10:
        key = fresh_key("speculative")
        order = [url for url in placement.order(key.encode()) if url != coordinator.url]
        if order[0] == slow.url:
            keys.append(key)
    for key in keys:
        assert coordinator.put(key, key.encode(), ack=3).status == 201
    slow.freeze()
    try:
        for key in keys:
            started = time.monotonic()
            answer = coordinator.get(key)
            elapsed = time.monotonic() - started
            assert answer.status == 200 and answer.body == key.encode()
            # It asked the third replica after the speculative delay instead of waiting for the timeout.
            assert elapsed < TIMEOUT_MS / 1000 / 2, f"{elapsed:.2f}s: waited for the frozen replica"
    finally:
        slow.resume()
