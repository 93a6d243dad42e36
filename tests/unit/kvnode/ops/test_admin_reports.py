"""What ``kvnode admin``'s read-only commands report, made of a node's view: ``status`` asking each member
it reaches for its surplus copies (canned members); ``ring``'s shares by zone and datacenter."""

from __future__ import annotations

import argparse
import json

from kvnode.ops.admin_reports import ring, status
from tests.canned_http import Answer, canned_server


def test_status_asks_each_member_it_reaches_for_its_surplus_copies() -> None:
    peer_stats = Answer(200, json.dumps({"gc": {"surplus": 35}}).encode())
    answers: dict[str, Answer] = {"/v0/stats": peer_stats}
    with canned_server(answers) as peer, canned_server({}) as asked:
        member = {"state": "connected", "reachable": True, "down_for_s": 0.0, "node_state": "serving"}
        members = [
            {**member, "url": asked.url, "self": True},
            {**member, "url": peer.url, "self": False},
            {**member, "url": "http://down:1", "self": False, "reachable": False},
        ]
        view = {
            "node": asked.url, "membership_version": 1, "replication_factor": 3, "next_replication_factor": 0,
            "joining": [], "leaving": [], "streamed": 0, "undone": "", "members": members,
            "clock": {}, "gc": {"surplus": 187}, "rebuild": {}, "hints": {"pending": {}},
        }  # fmt: skip
        report = status(view, argparse.Namespace(token=None, tls_ca=None))
    assert [m["surplus"] for m in report["members"]] == [187, 35, None]
    assert [sent.path for sent in peer.requests] == ["/v0/stats"] and asked.requests == []


def test_ring_counts_each_zones_and_each_datacenters_share_of_a_keys_copies() -> None:
    """Three zones of two, N = 3: every key is on three zones, so each zone holds exactly a third of the
    copies; two datacenters, 2 and 1 copies a key: two thirds and one third, and each datacenter's first
    replicas shared among its own members."""
    urls = [f"http://127.0.0.{host}:8080" for host in range(1, 7)]
    view = {
        "node": urls[0], "membership_version": 1, "cluster": urls, "tokens": urls, "joining": [],
        "leaving": [], "zones": ["a", "a", "b", "b", "c", "c"], "datacenters": ["dc1"] * 6,
        "replication_factor": 3, "next_replication_factor": 0,
    }  # fmt: skip
    zoned = ring(view, argparse.Namespace())
    spread = view | {"datacenters": ["east"] * 3 + ["west"] * 3, "replication_factor": {"east": 2, "west": 1}}
    spread_ring = ring(spread, argparse.Namespace())
    assert [(zone["zone"], zone["members"], zone["owner_share"]) for zone in zoned["zones"]] == [
        ("a", 2, 0.3333), ("b", 2, 0.3333), ("c", 2, 0.3333),
    ]  # fmt: skip
    assert zoned["datacenters"] == [
        {"datacenter": "dc1", "members": 6, "owners_per_key": 3, "owner_share": 1.0}
    ]
    shares = [
        (dc["datacenter"], dc["owners_per_key"], dc["owner_share"]) for dc in spread_ring["datacenters"]
    ]
    assert shares == [("east", 2, 0.6667), ("west", 1, 0.3333)]
    firsts = [member["first_replica_share"] for member in spread_ring["members"]]  # in each datacenter
    assert abs(sum(firsts[:3]) - 1) < 1e-3 and abs(sum(firsts[3:]) - 1) < 1e-3
