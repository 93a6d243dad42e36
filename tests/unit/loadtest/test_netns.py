"""The WAN test bed's pure parts: the datacenters' addresses, and the policy rules that send what crosses
between two datacenters into the delay line (the leftovers of earlier runs: tests/unit/kvnode/ops)."""

from __future__ import annotations

from loadtest.netns import DATACENTER_SUBNETS, crossing_rules, datacenter_address


def test_only_what_crosses_between_the_datacenters_goes_through_the_delay_line() -> None:
    assert crossing_rules(["198.51.100"]) == []  # one subnet: nothing crosses
    assert crossing_rules(list(DATACENTER_SUBNETS)) == [
        ["iif", "br0", "to", "203.0.113.0/24", "lookup", "100"],
        ["iif", "br1", "to", "198.51.100.0/24", "lookup", "100"],
    ]


def test_datacenters_have_subnets_of_their_own() -> None:
    assert [datacenter_address(dc, 7) for dc in (0, 1)] == ["198.51.100.7", "203.0.113.7"]
