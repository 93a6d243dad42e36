"""A running cluster's faults, through its admin API only (a canned node, tests/canned_http.py): every kind
that needs the machine skipped with its reason; a member asked to leave, once, when the cluster has more
members than its replication factor, with the admin token; skipped otherwise."""

from __future__ import annotations

import json
import random
import urllib.parse

from kvnode.check.remote import RemoteFaults
from tests.canned_http import Answer, canned_server


def cluster(members: list[str], n: int) -> Answer:
    return Answer(200, json.dumps({"cluster": members, "replication_factor": n}).encode())


def test_what_needs_the_machine_is_skipped_with_its_reason() -> None:
    faults = RemoteFaults(["http://127.0.0.1:1"], None, None)
    for kind in ("kill", "pause", "partition", "clock", "disk"):
        assert faults.unavailable(kind).startswith(f"{kind} skipped: "), kind
        assert "check --local injects it" in faults.unavailable(kind)


def test_a_member_leaves_once_asked_with_the_token_and_stays_out() -> None:
    members = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3", "http://127.0.0.1:4"]
    leave = "/v0/leave?" + urllib.parse.urlencode({"member": members[3]})
    with canned_server({"/v0/cluster": cluster(members, 3), leave: Answer(200, b"{}")}) as asked:
        faults = RemoteFaults([asked.url, members[3]], "admin-token", None)
        assert faults.unavailable("membership") == ""
        fault = faults.begin("membership", random.Random(1))
        assert (fault.kind, fault.target, fault.done) == ("membership", members[3], True)
        assert faults.targets() == [asked.url]  # the workers stop asking the member that left
        sent = [(request.method, request.path) for request in asked.requests]
        assert ("POST", leave) in sent
        assert {request.headers["Authorization"] for request in asked.requests} == {"Bearer admin-token"}
        again = faults.begin("membership", random.Random(1))
        assert again.target == "-" and len(asked.requests) == len(sent)


def test_a_cluster_of_no_more_members_than_its_replication_factor_is_not_shrunk() -> None:
    with canned_server({"/v0/cluster": cluster(["http://x:1", "http://x:2"], 2)}) as asked:
        faults = RemoteFaults([asked.url], None, None)
        assert faults.unavailable("membership") == (
            "membership skipped: a member may leave only a cluster of more members (2) than its replication "
            "factor (2)"
        )
