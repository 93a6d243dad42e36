"""kvnode.topology.epoch: an epoch's placements follow its membership (a member joining is written to
and not read from; one leaving is read from and not written to), and it is settled only while no member
joins or leaves."""

from __future__ import annotations

import dataclasses

import pytest

from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership

A, B, C = "http://a", "http://b", "http://c"


def test_a_settled_epoch_reads_where_it_writes_and_is_settled_since_it_began() -> None:
    epoch = Epoch(A, Membership.seeded([A, B]), {B: "b"}, since=42)
    assert epoch.placement.nodes == (A, B) and epoch.read_placement is None
    assert epoch.settled_since == 42


def test_a_member_joining_takes_writes_but_no_reads_and_the_epoch_is_not_settled() -> None:
    joining = Membership.seeded([A, B]).with_joining(C)
    epoch = Epoch(A, joining, {B: "b", C: "c"}, since=42)
    assert epoch.placement.nodes == (A, B, C)
    assert epoch.read_placement is not None and epoch.read_placement.nodes == (A, B)
    assert epoch.settled_since is None


def test_a_member_leaving_takes_reads_but_no_writes() -> None:
    leaving = Membership.seeded([A, B, C]).with_leaving(C)
    epoch = Epoch(A, leaving, {B: "b", C: "c"}, since=42)
    assert epoch.placement.nodes == (A, B)
    assert epoch.read_placement is not None and epoch.read_placement.nodes == (A, B, C)
    assert epoch.settled_since is None


def test_an_epoch_is_immutable() -> None:
    epoch: Epoch[str] = Epoch(A, Membership.seeded([A]), {}, since=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        epoch.since = 1  # type: ignore[misc]


def test_an_epoch_places_keys_with_its_nodes_datacenter_first() -> None:
    spread = Membership.seeded([A, B, C], datacenters=["west", "east", "west"])
    joining = spread.with_joining("http://d", datacenter="east")
    for membership in (spread, joining):
        epoch: Epoch[str] = Epoch(C, membership, {}, since=0)
        assert epoch.datacenter == "west"
        placements = [epoch.placement, epoch.read_placement or epoch.placement]
        assert [placement.datacenters for placement in placements] == [("west", "east")] * 2
    assert Epoch[str](B, spread, {}, since=0).placement.datacenters == ("east", "west")
