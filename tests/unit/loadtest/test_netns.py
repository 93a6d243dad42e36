"""The namespace hosts' pure parts: which namespaces are an earlier run's leftovers, and the policy rules
that send what crosses between two datacenters into the delay line."""

from __future__ import annotations

from loadtest.netns import DATACENTER_SUBNETS, crossing_rules, datacenter_address, leftover_namespaces


def test_leftovers_are_only_namespaces_of_this_kind_whose_run_is_gone() -> None:
    names = ["kvmh-100-br", "kvmh-100-n1", "kvmh-200-client", "kvmh-x-br", "other-100-br", "kvmh-100"]
    assert leftover_namespaces(names, "kvmh", lambda pid: pid == 200) == ["kvmh-100-br", "kvmh-100-n1"]
    assert leftover_namespaces(names, "kvmh", lambda pid: True) == []
    assert leftover_namespaces(names, "other", lambda pid: False) == ["other-100-br"]


def test_only_what_crosses_between_the_datacenters_goes_through_the_delay_line() -> None:
    assert crossing_rules(["198.51.100"]) == []  # one subnet: nothing crosses
    assert crossing_rules(list(DATACENTER_SUBNETS)) == [
        ["iif", "br0", "to", "203.0.113.0/24", "lookup", "100"],
        ["iif", "br1", "to", "198.51.100.0/24", "lookup", "100"],
    ]


def test_datacenters_have_subnets_of_their_own() -> None:
    assert [datacenter_address(dc, 7) for dc in (0, 1)] == ["198.51.100.7", "203.0.113.7"]
