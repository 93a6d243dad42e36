"""kvnode.topology.membership: the cluster's identity and membership as stored data, pure; and with real
nodes, the
stored membership ruling over a stale --cluster."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from kvnode.config import ReplicationFactor
from kvnode.topology.membership import (
    ChangeRefused,
    Membership,
    at_start,
    cluster_identity,
    own_place_warnings,
)

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"


def test_the_first_members_agree_on_the_cluster_identity_without_talking() -> None:
    assert Membership.seeded([A, B, C]) == Membership.seeded([A, B, C])
    assert Membership.seeded([A, B, C]).cluster == cluster_identity([A, B, C])
    assert Membership.seeded([A, B, C]).cluster != Membership.seeded([A, B, D]).cluster


def test_the_stored_membership_rules_and_a_differing_flag_is_named() -> None:
    stored = dataclasses.replace(Membership.seeded([A, B, C]), version=3)
    assert at_start(None, [A, B]) == (Membership.seeded([A, B]), [])
    assert at_start(stored, [A, B, C]) == (stored, [])
    kept, warnings = at_start(stored, [A, B, C, D])
    assert kept == stored
    assert warnings == [
        "--cluster differs from the stored membership (version 3), which this node keeps: "
        "http://d:1 is in --cluster and not a member"
    ]
    assert "another order" in at_start(stored, [C, B, A])[1][0]
    assert "http://c:1 is a member and not in --cluster" in at_start(stored, [A])[1][0]
    # No --cluster (a restart on the data dir, as the README's): nothing to compare; a first start without
    # it seeds a cluster of this node alone.
    assert at_start(stored, [], own=A) == (stored, [])
    assert at_start(None, [], own=A) == (Membership.seeded([A]), [])


def test_the_replication_factor_is_set_at_the_first_start_and_kept_by_every_change() -> None:
    first, warnings = at_start(None, [A, B, C], replication=2)
    assert (first.replication, warnings) == (ReplicationFactor(2), [])
    assert Membership.seeded([A, B, C]).replication == ReplicationFactor(
        3
    )  # by default, the number of first members
    joined = first.with_joining(D)
    changed = [
        joined,
        joined.settled(D),
        first.with_leaving(C),
        first.with_leaving(C).removed(C),
        first.replaced(C, D),
    ]
    assert [membership.replication for membership in changed] == [ReplicationFactor(2)] * 5
    assert Membership.decode(joined.encode()) == joined
    reads = joined.read_placement()
    assert reads is not None and reads.replication == joined.placement().replication == 2
    kept, warnings = at_start(first, [A, B, C], replication=3)
    assert kept == first
    assert warnings == [
        "--replication-factor 3 differs from the stored replication factor 2, which this node keeps"
    ]
    assert at_start(first, [A, B, C])[1] == []  # no flag: nothing to say


def test_a_membership_stored_before_the_replication_factor_has_every_member_own_every_key() -> None:
    old = b'{"cluster": "x", "version": 2, "members": [{"url": "http://a:1", "token": "http://a:1", '
    old += b'"state": "normal"}, {"url": "http://b:1", "token": "http://b:1", "state": "normal"}]}'
    assert Membership.decode(old).replication == ReplicationFactor(2)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b'{"cluster": "x", "version": 1}',
        b'{"cluster": "x", "version": "1", "members": [{"url": "http://a:1", "token": "t"}]}',
        b'{"cluster": "x", "version": true, "members": [{"url": "http://a:1", "token": "t"}]}',
        b'{"cluster": "x", "version": 1, "members": [1]}',
        b'{"cluster": "x", "version": 1, "members": [{"url": "http://a:1"}]}',
        b'{"cluster": "x", "version": 1, "members": [{"url": "http://a:1", "token": 7}]}',
        b'{"cluster": "x", "version": 0, "members": [{"url": "http://a:1", "token": "t"}]}',
        b'{"cluster": "x", "version": 1, "members": []}',
        b'{"cluster": "x", "version": 1, "members": [{"url": "http://a:1", "token": "t"}, '
        b'{"url": "http://a:1", "token": "u"}]}',
        b'{"cluster": "x", "version": 1, "members": [{"url": "http://a:1", "token": "t"}, '
        b'{"url": "http://b:1", "token": "t"}]}',
    ],
)
def test_anything_encode_did_not_write_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        Membership.decode(raw)


def test_a_join_step_by_step_writes_to_the_newcomer_before_it_is_read_from() -> None:
    start = Membership.seeded([A, B, C])
    assert start.read_placement() is None  # no change under way: reads and writes use one placement
    joining = start.with_joining(D)
    assert (joining.version, joining.urls, joining.joining) == (2, (A, B, C, D), frozenset({D}))
    assert joining.placement().nodes == (A, B, C, D)  # writes reach the newcomer
    read = joining.read_placement()
    assert read is not None and read.nodes == (A, B, C)  # reads stay on the present owners
    assert Membership.decode(joining.encode()) == joining
    done = joining.settled(D)
    assert (done.version, done.joining, done.read_placement()) == (3, frozenset(), None)
    with pytest.raises(ChangeRefused, match="is not joining"):
        done.settled(D)


def test_a_leave_step_by_step_reads_from_the_leaving_member_until_it_is_removed() -> None:
    leaving = Membership.seeded([A, B, C]).with_leaving(B)
    assert leaving.placement().nodes == (A, C)  # the next owners take writes
    read = leaving.read_placement()
    assert read is not None and read.nodes == (A, B, C)  # reads stay on the present ones
    assert Membership.decode(leaving.encode()) == leaving
    gone = leaving.removed(B)
    assert (gone.version, gone.urls, gone.tokens, gone.leaving) == (3, (A, C), (A, C), frozenset())


@pytest.mark.parametrize("factor", [2, 4])
def test_a_new_replication_factor_writes_to_the_owners_under_both_and_reads_by_the_present_one(
    factor: int,
) -> None:
    start = Membership.seeded([A, B, C, D], replication=3)
    resizing = start.resized(factor)
    assert (resizing.version, resizing.replication) == (2, ReplicationFactor(3))
    assert resizing.next_replication == ReplicationFactor(factor)
    assert resizing.changing and resizing.claimant == A
    assert resizing.placement().replication == max(3, factor)  # writes: the owners under both factors
    read = resizing.read_placement()
    assert read is not None and read.replication == 3  # reads: the present owners
    assert Membership.decode(resizing.encode()) == resizing
    done = resizing.resettled()
    assert (done.version, done.replication, done.next_replication) == (3, ReplicationFactor(factor), None)
    assert not done.changing
    assert done.read_placement() is None and done.placement().replication == factor
    with pytest.raises(ChangeRefused, match="the replication factor is not changing"):
        done.resettled()


def test_a_replication_factor_out_of_one_to_the_members_or_the_present_one_is_refused() -> None:
    start = Membership.seeded([A, B, C, D], replication=3)
    for factor in (0, 5, -1):
        with pytest.raises(ValueError, match=f"from 1 to the 4 members, not {factor}"):
            start.resized(factor)
    with pytest.raises(ChangeRefused, match="the replication factor is 3 already"):
        start.resized(3)
    with pytest.raises(ValueError, match="changes only while no member joins or leaves"):
        dataclasses.replace(start.with_joining("http://e:1"), next_replication=ReplicationFactor(2))


def test_one_change_at_a_time_and_no_change_that_cannot_be() -> None:
    start = Membership.seeded([A, B, C])
    changes: list[Callable[[Membership], Membership]] = [
        lambda m: m.with_joining("http://e:1"),
        lambda m: m.with_leaving(A),
        lambda m: m.replaced(A, "http://e:1"),
        lambda m: m.resized(1),
    ]
    for under_way in (start.with_joining(D), start.with_leaving(C), start.resized(2)):
        for change in changes:
            with pytest.raises(ChangeRefused, match=r"a change is under way: .* one change at a time"):
                change(under_way)
    with pytest.raises(ChangeRefused, match="is a member already"):
        start.with_joining(A)
    with pytest.raises(ChangeRefused, match="is not a member"):
        start.with_leaving(D)
    with pytest.raises(ChangeRefused, match="is the only member"):
        Membership.seeded([A]).with_leaving(A)
    replaced = start.replaced(C, D)
    assert (replaced.urls, replaced.tokens) == ((A, B, D), (A, B, C))  # its place, and its token


def test_a_join_that_never_came_is_undone_to_the_members_before_its_claim() -> None:
    start = Membership.seeded([A, B, C])
    undone = start.with_joining(D).undone(D)
    assert (undone.version, undone.urls, undone.tokens, undone.joining) == (
        3,
        (A, B, C),
        (A, B, C),
        frozenset(),
    )
    assert (
        undone.placement().nodes == (A, B, C) and undone.read_placement() is None
    )  # reads and writes: A, B, C
    assert undone.with_joining(D).version == 4  # a change may start again
    replaced = start.replaced(C, D)  # a node that took a member's place is no joiner: its token stays C's
    assert replaced.with_joining("http://e:1").undone("http://e:1").tokens == (A, B, C)


@pytest.mark.parametrize(
    ("membership", "member", "reason"),
    [
        (Membership.seeded([A, B, C]), B, "is a member like the others, not joining: admin leave removes it"),
        (Membership.seeded([A, B, C]).with_joining(D), B, "is a member like the others"),
        (Membership.seeded([A, B, C]).with_leaving(B), B, "is leaving, not joining: its leave goes on"),
        (Membership.seeded([A, B, C]).with_joining(D), "http://e:1", r"is not a member \(members: "),
    ],
)
def test_only_a_member_joining_is_undone(membership: Membership, member: str, reason: str) -> None:
    with pytest.raises(ChangeRefused, match=reason):
        membership.undone(member)


def test_the_claimant_is_the_first_member_not_joining_one_leaving_included_until_it_is_removed() -> None:
    start = Membership.seeded([A, B, C])
    assert (start.claimant, start.with_joining(D).claimant, start.with_leaving(A).claimant) == (A, A, A)
    assert start.with_leaving(A).removed(A).claimant == B


# --- zones and datacenters ------------------------------------------------------------------------------

E, F = "http://e:1", "http://f:1"
SIX = [A, B, C, D, E, F]
TWO_DCS = ["east", "east", "east", "west", "west", "west"]
RACKS = ["r1", "r2", "r3", "r1", "r2", "r3"]


def test_by_default_a_members_zone_is_its_host_and_there_is_one_datacenter() -> None:
    first = Membership.seeded([A, B, C])
    assert (first.zones, first.datacenters) == (("a", "b", "c"), ("dc1", "dc1", "dc1"))
    assert first.placement().layout == first.placement_without(()).layout == (A, B, C, A, B, C, "3")


def test_first_members_zones_and_datacenters_are_kept_by_every_change_and_a_newcomer_brings_its_own() -> None:
    first = Membership.seeded(SIX, 2, RACKS, TWO_DCS)
    assert (first.zone_of(D), first.datacenter_of(D), first.members_by_datacenter()) == (
        "r1", "west", {"east": 3, "west": 3},
    )  # fmt: skip
    joining = first.with_joining("http://g:1", "r4", "west")
    assert (joining.zone_of("http://g:1"), joining.datacenter_of("http://g:1")) == ("r4", "west")
    bare = first.with_joining("http://g:1")  # no --zone, no --datacenter: its host, and dc1
    assert (bare.zone_of("http://g:1"), bare.datacenter_of("http://g:1")) == ("g", "dc1")
    replaced = first.replaced(D, "http://g:1")  # a replacement takes its predecessor's place: zone, DC
    assert (replaced.zone_of("http://g:1"), replaced.datacenter_of("http://g:1")) == ("r1", "west")
    assert (first.home_of(D), first.home_of("http://g:1")) == ("west", "")  # "": no member, no home
    gone = first.with_leaving(B).removed(B)
    assert (gone.zones, gone.datacenters) == (
        ("r1", "r3", "r1", "r2", "r3"),
        tuple(TWO_DCS[:1] + TWO_DCS[2:]),
    )
    assert joining.undone("http://g:1") == dataclasses.replace(first, version=3)
    for membership in (joining, joining.settled("http://g:1"), replaced, gone):
        assert Membership.decode(membership.encode()) == membership
        assert Membership.from_described(membership.described()) == membership


def test_a_membership_stored_before_zones_decodes_with_the_defaults_and_places_keys_as_before() -> None:
    old = (
        b'{"cluster": "x", "version": 2, "replication_factor": 2, "next_replication_factor": 0, "members": ['
    )
    old += b'{"url": "http://a:1", "token": "http://a:1", "state": "normal"}, '
    old += b'{"url": "http://b:1", "token": "http://b:2", "state": "normal"}, '
    old += b'{"url": "http://c:1", "token": "http://c:1", "state": "normal"}]}'
    decoded = Membership.decode(old)
    assert (decoded.zones, decoded.datacenters) == (("a", "b", "c"), ("dc1",) * 3)
    assert decoded.replication == ReplicationFactor(2)
    assert decoded.placement().layout == (A, B, C, A, "http://b:2", C, "2")  # as the placement it had


def test_each_datacenter_holds_its_own_n_of_every_key_listed_the_nodes_own_first() -> None:
    spread = Membership.seeded(SIX, ReplicationFactor.parse("east:2,west:3"), RACKS, TWO_DCS)
    assert str(spread.replication) == "east:2,west:3"
    placement = spread.placement("west")
    assert placement.owners_by_datacenter == (("west", 3), ("east", 2))
    owners = placement.owners(b"user:42")
    assert [placement.datacenter_of(url) for url in owners] == ["west"] * 3 + ["east"] * 2
    assert len({spread.zone_of(url) for url in owners[:3]}) == 3  # in distinct zones


def test_without_a_factor_each_datacenter_keeps_a_copy_on_each_of_its_first_members() -> None:
    assert Membership.seeded(SIX, datacenters=TWO_DCS).replication == ReplicationFactor(3)
    uneven = Membership.seeded(SIX[:5], datacenters=TWO_DCS[:5])
    assert str(uneven.replication) == "east:3,west:2"


def test_a_replication_factor_per_datacenter_changes_as_one_change_under_both_factors() -> None:
    start = Membership.seeded(SIX, ReplicationFactor.parse("east:2,west:2"), RACKS, TWO_DCS)
    resizing = start.resized(ReplicationFactor.parse("east:3,west:1"))
    assert resizing.placement().owners_by_datacenter == (("east", 3), ("west", 2))  # writes: the larger
    read = resizing.read_placement()
    assert read is not None and read.owners_by_datacenter == (("east", 2), ("west", 2))
    assert Membership.decode(resizing.encode()) == resizing
    done = resizing.resettled()
    assert done.placement().owners_by_datacenter == (("east", 3), ("west", 1))
    assert start.resized(3).placement("west").owners_by_datacenter == (("west", 3), ("east", 3))
    for factor, reason in (
        ("east:2", "leaves out west"),
        ("east:2,west:2,north:1", "names north, which has no members"),
        ("east:4,west:2", "N=4 exceeds the 3 members of datacenter east"),
    ):
        with pytest.raises(ValueError, match=reason):
            start.resized(ReplicationFactor.parse(factor))
    with pytest.raises(ChangeRefused, match="the replication factor is 2 already"):
        start.resized(2)  # the same N in every datacenter, said another way


def test_zones_or_datacenters_that_differ_from_the_stored_ones_are_named_and_ignored() -> None:
    stored = Membership.seeded([A, B, C], zones=["r1", "r2", "r3"], datacenters=["east", "east", "west"])
    kept, warnings = at_start(
        stored, [A, B, C], zones=["r1", "r2", "r9"], datacenters=["east", "west", "west"]
    )
    assert kept == stored
    assert warnings == [
        "--zones differs from the stored membership (version 1), which this node keeps: http://c:1 is in "
        "zone r3, not r9",
        "--datacenters differs from the stored membership (version 1), which this node keeps: http://b:1 is "
        "in datacenter east, not west",
    ]
    assert (
        at_start(stored, [A, B, C], zones=["r1", "r2", "r3"], datacenters=["east", "east", "west"])[1] == []
    )
    assert at_start(stored, [A, B, C])[1] == []  # not given: nothing to say
    assert own_place_warnings(stored, C, "r3", "east") == [
        "--datacenter east differs from the stored membership (version 1), which this node keeps: "
        "http://c:1 is in datacenter west"
    ]
    assert own_place_warnings(stored, D, "r9", "north") == []  # no member: it says so and stops
