"""The WAN test bed (loadtest.netns, loadtest.wan_delay) delays what it should: a round trip between
the two datacenters takes at least the round trip asked for, one within a datacenter a small part of it;
with the delay line set to 0 it adds a fraction of a millisecond; and what it passed is counted. Skipped,
with the reason, where namespaces or a TUN device cannot be made (tests/namespaces.py)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from loadtest.netns import NamespaceNetwork, connect_round_trips_ms, listening_socket
from tests.namespaces import PORT, NamespaceClient, hosts

ROUND_TRIP_MS = 50.0
CONNECTS = 20
NEAR, FAR = {"near": 1}, {"far": 1, "far2": 2}
ADDRESS = {"near": f"198.51.100.{NEAR['near']}", "far": "203.0.113.1", "far2": "203.0.113.2"}


@pytest.fixture(scope="module")
def bed() -> Iterator[tuple[NamespaceNetwork, NamespaceClient, NamespaceClient]]:
    """Two datacenters: the client and a host in one, two hosts in the other, each host listening."""
    with hosts(NEAR, far=FAR, round_trip_ms=ROUND_TRIP_MS) as (network, client):
        listeners = [listening_socket(network.name(role), address, PORT) for role, address in ADDRESS.items()]
        far = NamespaceClient(network.name("far"))
        try:
            yield network, client, far
        finally:
            far.close()
            for listener in listeners:
                listener.close()


def round_trips_ms(address: str) -> list[float]:
    return connect_round_trips_ms(address, PORT, CONNECTS)


def test_a_round_trip_between_datacenters_takes_the_delay_and_one_within_a_datacenter_does_not(
    bed: tuple[NamespaceNetwork, NamespaceClient, NamespaceClient],
) -> None:
    _, client, far = bed
    across = client.run(round_trips_ms, ADDRESS["far"])
    assert min(across) >= ROUND_TRIP_MS, across
    assert statistics.median(across) < ROUND_TRIP_MS + 10, across
    within = client.run(round_trips_ms, ADDRESS["near"])
    within_far = far.run(round_trips_ms, ADDRESS["far2"])
    assert statistics.median(within) < ROUND_TRIP_MS / 10, within
    assert statistics.median(within_far) < ROUND_TRIP_MS / 10, within_far


def test_the_delay_line_set_to_0_adds_a_fraction_of_a_millisecond_and_counts_what_it_passed(
    bed: tuple[NamespaceNetwork, NamespaceClient, NamespaceClient],
) -> None:
    network, client, _ = bed
    network.delay(0)
    try:
        through = client.run(round_trips_ms, ADDRESS["far"])
        within = client.run(round_trips_ms, ADDRESS["near"])
        added = statistics.median(through) - statistics.median(within)
        assert added < 2.0, (through, within)  # measured: about 0.2 ms, two passes through the line
        figures = network.stop_delay()
        # Each connect and close: SYN, SYN-ACK, ACK, FIN, ACK... both ways through the line.
        assert figures["packets"] >= 3 * CONNECTS, figures
        assert figures["hold_ms"] == 0 and figures["dropped"] == 0, figures
    finally:
        network.delay(ROUND_TRIP_MS)
