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
