"""kvnode.ops.ports: free loopback ports, consecutive and below the kernel's ephemeral range, and a start
tried again on fresh ports when another process took one first (real node processes on loopback), and
only then."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.ops.ports import START_ATTEMPTS, free_ports, start_on_free_ports
from kvnode.ops.processes import NodeStartError


def ephemeral_start() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_free_ports_are_consecutive_and_below_the_ephemeral_range() -> None:
    ports = free_ports(5)
    assert ports == list(range(ports[0], ports[0] + 5))
    assert ports[0] >= 10_000 and ports[-1] < ephemeral_start()


def test_a_start_is_tried_on_fresh_ports_while_it_loses_one_and_given_up_after_the_last() -> None:
    tried: list[list[int]] = []

    def start(ports: list[int], losses: int) -> list[int]:
        tried.append(ports)
        if len(tried) <= losses:
            raise NodeStartError("http://127.0.0.1:1", "OSError: [Errno 98] Address already in use")
        return ports

    assert start_on_free_ports(2, lambda ports: start(ports, START_ATTEMPTS - 1)) == tried[-1]
    assert len(tried) == START_ATTEMPTS and all(len(ports) == 2 for ports in tried)
    tried.clear()
    with pytest.raises(NodeStartError, match="Address already in use"):
        start_on_free_ports(2, lambda ports: start(ports, START_ATTEMPTS))
    assert len(tried) == START_ATTEMPTS
