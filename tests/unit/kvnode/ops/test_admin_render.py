"""admin's tables and lines for a person (kvnode.ops.admin_render), from reports as kvnode.ops.admin makes
them: pinned to the character, since people and scripts read them."""

from __future__ import annotations

from typing import Any

from kvnode.ops.admin_render import render

A, B, C = "http://a:1", "http://b:2", "http://c:3"


def member(url: str, **fields: Any) -> dict[str, Any]:
    return {
        "url": url, "self": False, "state": "connected", "refusal": "", "reachable": True, "down_for_s": 0.0,
        "node_state": "serving", "hints_pending": 0, "protocol": 2, "surplus": 0, **fields,
    }  # fmt: skip


def status(**changes: Any) -> dict[str, Any]:
    report = {
        "node": A,
        "membership_version": 4,
        "replication_factor": 3,
        "next_replication_factor": 0,
        "joining": [],
        "leaving": [],
        "streamed": 0,
        "undone": "",
        "members": [
            member(A, self=True, state="self", protocol="1-2"),
            member(
                B,
                state="refused",
                refusal="secret",
                reachable=False,
                down_for_s=12.34,
                hints_pending=5,
                protocol=0,
                surplus=None,
            ),
            member(C),
        ],
        "clock": {
            "fenced": False,
            "far": [],
            "summary": "clock within the maximum skew of 2 measured peer(s)",
        },
        "gc": {"tombstones_dropped": 0, "expired_dropped": 0, "waiting": 0, "waiting_for": {}},
        "rebuild": {"peers_done": 0, "peers": 2, "records_received": 0, "waiting_for": {}},
    }
    return report | changes


TABLE = """cluster of 3 as http://a:1 sees it; each key on N=3 of them
MEMBER      STATE            REACHABLE  DOWN FOR  HINTS PENDING  PROTOCOL  SURPLUS
http://a:1  self             yes        -         -              1-2       0
http://b:2  refused: secret  no         12.3s     5              -         -
http://c:3  connected        yes        -         0              2         0"""


def test_status_is_a_table_of_members_and_no_line_while_all_is_well() -> None:
    assert render("status", {}, status()) == TABLE


def test_status_has_a_line_for_a_change_a_clock_off_gc_waiting_and_a_rebuild() -> None:
    report = status(
        joining=[C],
        streamed=17,
        clock={"fenced": True, "far": [B, C], "summary": "this node's clock is 9.0 s ahead"},
        gc={"tombstones_dropped": 3, "expired_dropped": 1, "waiting": 2, "waiting_for": {B: 2}},
        rebuild={"peers_done": 1, "peers": 2, "records_received": 40, "waiting_for": {B: "refused"}},
    )
    report["members"][0]["node_state"] = "rebuilding"
    report["members"][2]["node_state"] = "unknown"
    assert render("status", {}, report) == TABLE + (
        "\nmembership version 4: http://c:3 is joining (17 records streamed by this node)"
        "\nclock: this node's clock is 9.0 s ahead (this node refuses to coordinate writes)"
        "\ngc: 3 tombstones and 1 expired values dropped since start; 2 past their grace period wait for a "
        "repair with http://b:2 (2)"
        "\ndata: http://a:1 is rebuilding: 1 of 2 peers done, 40 records received; waiting for http://b:2: "
        "refused"
        "\ndata: http://c:3 is unknown"
    )


def test_status_shows_each_member_s_surplus_copies_and_a_line_that_says_admin_cleanup_drops_them() -> None:
    report = status()
    report["members"][0]["surplus"], report["members"][2]["surplus"] = 187, 35
    assert render("status", {}, report) == (
        """cluster of 3 as http://a:1 sees it; each key on N=3 of them
MEMBER      STATE            REACHABLE  DOWN FOR  HINTS PENDING  PROTOCOL  SURPLUS
http://a:1  self             yes        -         -              1-2       187
http://b:2  refused: secret  no         12.3s     5              -         -
http://c:3  connected        yes        -         0              2         35
surplus: 222 copies of keys their holder no longer owns, on 2 of 3 members (as each one's last GC pass """
        "counted them): admin cleanup drops them now"
    )


def test_status_says_the_replication_factor_that_is_coming() -> None:
    report = status(next_replication_factor=2, streamed=5)
    assert render("status", {}, report) == TABLE + (
        "\nmembership version 4: the replication factor moves from 3 to 2 (5 records streamed by this node)"
    )


def test_status_shows_each_members_zone_and_datacenter_once_they_were_given() -> None:
    report = status(replication_factor={"east": 2, "west": 1}, next_replication_factor={"east": 1, "west": 1})
    for m, zone, dc in zip(report["members"], ("r1", "r2", "r1"), ("east", "east", "west"), strict=True):
        m.update(zone=zone, datacenter=dc)
    assert render("status", {}, report) == (
        "cluster of 3 as http://a:1 sees it; each key on N=east:2,west:1 (each datacenter's) of them\n"
        "MEMBER      STATE            REACHABLE  DOWN FOR  HINTS PENDING  PROTOCOL  SURPLUS  ZONE  "
        "DATACENTER\n"
        "http://a:1  self             yes        -         -              1-2       0        r1    east\n"
        "http://b:2  refused: secret  no         12.3s     5              -         -        r2    east\n"
        "http://c:3  connected        yes        -         0              2         0        r1    west\n"
        "membership version 4: the replication factor moves from east:2,west:1 to east:1,west:1 (0 records "
        "streamed by this node)"
    )
    for m in report["members"]:  # each its host's zone, one datacenter: the defaults, not shown
        m.update(zone=m["url"][7], datacenter="dc1")
    assert render("status", {}, status() | {"members": report["members"]}) == TABLE
    for m, dc in zip(report["members"], ("east", "east", "west"), strict=True):
        m.update(datacenter=dc)
    assert render("status", {}, status() | {"members": report["members"]}).startswith(
        "cluster of 3 as http://a:1 sees it; each key on N=3 in each datacenter of them\n"
    )


def test_the_ring_shows_each_datacenters_and_each_zones_share_of_a_keys_copies() -> None:
    members = [
        {"position": i, "url": url, "first_replica_share": 1 / 3} for i, url in enumerate((A, B, C), 1)
    ]
    datacenters = [
        {"datacenter": "east", "members": 2, "owners_per_key": 2, "owner_share": 0.6667},
        {"datacenter": "west", "members": 1, "owners_per_key": 1, "owner_share": 0.3333},
    ]
    zones = [
        {"datacenter": "east", "zone": "r1", "members": 1, "owner_share": 0.3333},
        {"datacenter": "east", "zone": "r2", "members": 1, "owner_share": 0.3333},
        {"datacenter": "west", "zone": "r1", "members": 1, "owner_share": 0.3333},
    ]
    report = {"node": A, "members": members, "datacenters": datacenters, "zones": zones}
    assert render("ring", {}, report).split("\n", 5)[5] == (
        "\neach datacenter's share of the copies of a key (N: the owners each key has there)\n"
        "DATACENTER  MEMBERS  N  COPIES\n"
        "east        2        2  66.7%\n"
        "west        1        1  33.3%\n"
        "\n"
        "each zone's share of the copies of a key\n"
        "DATACENTER  ZONE  MEMBERS  COPIES\n"
        "east        r1    1        33.3%\n"
        "east        r2    1        33.3%\n"
        "west        r1    1        33.3%"
    )
    one = {"datacenter": "dc1", "zone": "127.0.0.1", "members": 3, "owner_share": 1.0}
    alone = report | {"datacenters": datacenters[:1], "zones": [one]}
    assert render("ring", {}, alone).count("\n") == 4  # one zone, one datacenter: the members alone


def test_hints_is_a_column_for_each_figure_by_target_and_the_drops_by_reason_in_the_title() -> None:
    report = {
        "node": A,
        "pending": {B: 5, C: 0},
        "kept": {B: 7, C: 0},
        "delivered": {B: 2, C: 0},
        "dropped": {"window": 1, "expired": 4},
    }
    assert render("hints", {}, report) == (
        "hints kept by http://a:1 (since it started: kept, delivered; dropped: expired 4, window 1)\n"
        "TARGET      PENDING  KEPT  DELIVERED\n"
        "http://b:2  5        7     2\n"
        "http://c:3  0        0     0"
    )
    assert render("hints", {}, report | {"dropped": {}}).startswith(
        "hints kept by http://a:1 (since it started: kept, delivered; dropped: none)\n"
    )


def replica(order: int, url: str, paxos: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    return {"order": order, "url": url, "owner": order <= 2, "self": False, "reachable": True,
            "paxos": paxos, **fields}  # fmt: skip


def test_locate_shows_each_round_owners_paxos_state_and_why_one_did_not_answer() -> None:
    accepted = {"ballot": "1002.00000000000000bb", "etag": "0" * 31 + "9", "delete": False}
    report = {
        "node": A,
        "key": "user:42",
        "replication_factor": 2,
        "replicas": [
            replica(
                1,
                B,
                {
                    "answered": True,
                    "promised": "1002.00000000000000bb",
                    "accepted": accepted,
                    "committed": "1001.00000000000000aa",
                },
            ),
            replica(
                2,
                C,
                {"answered": False, "error": "cannot reach http://c:3: connection refused"},
                reachable=False,
            ),
            replica(3, A, None, self=True),
        ],
    }
    assert render("locate", {}, report) == (
        "key 'user:42': owned by the first N=2, from=k uses the first k; reachable as http://a:1 sees it\n"
        "#  MEMBER                  OWNER  REACHABLE\n"
        "1  http://b:2              yes    yes\n"
        "2  http://c:3              yes    no\n"
        "3  http://a:1 (this node)  no     yes\n"
        "Paxos state of the key on the owners its rounds ask (ballots are microseconds.node)\n"
        "OWNER       PROMISED               ACCEPTED, NOT COMMITTED                                       "
        "LAST COMMIT\n"
        'http://b:2  1002.00000000000000bb  1002.00000000000000bb put "00000000000000000000000000000009"  '
        "1001.00000000000000aa\n"
        "http://c:3  unreachable            -                                                             -\n"
        "http://c:3: cannot reach http://c:3: connection refused"
    )


def test_locate_shows_a_key_no_round_touched_as_dashes() -> None:
    nothing = {"answered": True, "promised": None, "accepted": None, "committed": None}
    report = {"node": A, "key": "k", "replication_factor": 1, "replicas": [replica(1, A, nothing, self=True)]}
    assert render("locate", {}, report).splitlines()[-2:] == [
        "OWNER       PROMISED  ACCEPTED, NOT COMMITTED  LAST COMMIT",
        "http://a:1  -         -                        -",
    ]
