"""kvnode.client.routing: which member a client asks for a key, in-process: placement order, a failed
member demoted behind the others, a member that answered 503 left to rest."""

from __future__ import annotations

from kvnode.client.routing import Members
from kvnode.topology.placement import Placement

URLS = ["http://a:1", "http://b:1", "http://c:1"]


def test_a_key_goes_to_its_replicas_in_placement_order() -> None:
    members = Members(Placement(URLS))
    for key in ("k1", "user:42", "ключ"):
        assert members.order(key) == Placement(URLS).order(key.encode())


def test_a_demoted_member_is_asked_after_every_other() -> None:
    members = Members(Placement(URLS))
    first = members.order("k")[0]
    members.demote(first)
    assert members.order("k")[-1] == first
    assert sorted(members.order("k")) == sorted(URLS)


def test_a_resting_member_is_skipped_while_another_is_ready() -> None:
    members = Members(Placement(URLS))
    order = members.order("k")
    members.rest(order[0], 60.0)
    assert members.next_for(order, tried=[]) == (order[1], 0.0)
    members.rest(order[1], 60.0)
    members.rest(order[2], 30.0)
    url, wait = members.next_for(order, tried=[])
    assert url == order[2] and 29.0 < wait <= 30.0  # every one resting: the soonest ready, and how long


def test_once_every_member_was_tried_the_next_ask_backs_off() -> None:
    members = Members(Placement(URLS))
    order = members.order("k")
    url, wait = members.next_for(order, tried=order)
    assert url in order and wait > 0


SPREAD_VIEW = {
    "cluster": URLS,
    "tokens": URLS,
    "zones": ["r1", "r2", "r1"],
    "datacenters": ["east", "west", "west"],
    "replication_factor": {"east": 1, "west": 2},
    "next_replication_factor": 0,
    "members": [{"url": url, "reachable": url != URLS[2]} for url in URLS],
}


def test_a_view_with_datacenters_places_keys_as_the_nodes_do_the_clients_datacenter_first() -> None:
    west = Members.learnt(SPREAD_VIEW, None, "west")
    assert west.placement.owners_by_datacenter == (("west", 2), ("east", 1))
    assert [west.placement.zone_of(url) for url in URLS] == ["r1", "r2", "r1"]
    placement = Placement(URLS, replication={"east": 1, "west": 2}, datacenters=["east", "west", "west"])
    for key in ("k1", "user:42"):
        owners = placement.owners(key.encode())
        assert sorted(west.placement.owners(key.encode())) == sorted(owners)
        assert west.placement.datacenter_of(west.placement.order(key.encode())[0]) == "west"
    assert west.order("k1")[-1] == URLS[2]  # the node cannot reach it: demoted
    assert Members.learnt(SPREAD_VIEW, west, "west") is west  # the same placement: its cache kept
    assert Members.learnt(SPREAD_VIEW, west, "east").placement.datacenters == ("east", "west")


def test_a_view_from_a_node_older_than_zones_places_keys_as_it_did() -> None:
    old = {"cluster": URLS, "tokens": URLS, "replication_factor": 2, "members": []}
    assert Members.learnt(old, None).placement.layout == Placement(URLS, replication=2).layout
