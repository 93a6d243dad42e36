"""The operator's endpoints (kvnode.node.operator_api) on nodes served in this process: a repair started
and its progress, as JSON ending with a newline; a cleanup started and followed to its end, its surplus
copy dropped once the owner confirmed it, or 409 while a change is under way; a leave answered 202 with
the membership version that has the member leaving and the change (who walks it), or 409 with the
one-line reason it cannot be; a join undone (remove) answered 200 with the version without the joiner, or
409 for a member that is not joining; a replication factor per datacenter answered 202, or 400 with why it
does not fit."""

from __future__ import annotations

import json
from typing import Any

from kvnode.cluster.changes import make_as_member
from kvnode.ops.ports import free_ports
from kvnode.storage.records import Record
from tests.drivers import Serve, ServedNode
from tests.harness import eventually


def as_json(body: bytes) -> Any:
    assert body.endswith(b"}\n"), body[-20:]
    return json.loads(body)


async def test_a_repair_is_started_and_its_progress_shown(served: ServedNode) -> None:
    assert await served.call("GET", "/v0/repair") == (
        404,
        b"no repair has been asked of this node since it started\n",
    )
    status, body = await served.call("POST", "/v0/repair")
    started = as_json(body)
    assert status == 202 and started["peers"] == [] and "summary" in started
    status, body = await served.call("GET", "/v0/repair")
    assert status == 200 and as_json(body)["peers"] == []


async def test_a_cleanup_drops_a_surplus_copy_its_owner_holds_and_shows_its_progress(serve: Serve) -> None:
    ports = free_ports(2)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    first, second = [await serve(port=port, cluster=members, replication_factor=1) for port in ports]
    assert await first.call("GET", "/v0/cleanup") == (
        404,
        b"no cleanup has been asked of this node since it started\n",
    )
    placement = first.parts.members.placement
    key = next(b"key-%d" % i for i in range(100) if placement.owners(b"key-%d" % i) == [members[1]])
    record = Record.put(first.parts.clock.now(), b"value")
    for node in (first, second):
        node.parts.storage.apply(key, record)  # on its owner, and a surplus copy on the first
    status, body = await first.call("POST", "/v0/cleanup")
    assert status == 202 and {"done", "completed", "dropped", "summary"} <= as_json(body).keys()
    cleanup = first.parts.gc.cleanup
    await eventually(lambda: cleanup is not None and cleanup.done, what="the cleanup's end")
    status, body = await first.call("GET", "/v0/cleanup")
    run = as_json(body)
    assert status == 200 and (run["completed"], run["scanned"], run["dropped"], run["unconfirmed_by"]) == (
        True,
        1,
        1,
        {},
    )
    assert first.parts.storage.read(key) is None and second.parts.storage.read(key) == record


async def test_a_cleanup_is_409_while_a_member_joins(serve: Serve) -> None:
    ports = free_ports(2)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    first, _ = [await serve(port=port, cluster=members) for port in ports]
    await make_as_member(first.parts.members, first.parts.members.membership.with_joining("http://ghost:1"))
    assert await first.call("POST", "/v0/cleanup") == (
        409,
        b"a membership change is under way (a member joining or leaving, or a new replication factor): run "
        b"cleanup once it is over\n",
    )


async def test_a_leave_that_cannot_be_made_is_409_with_its_reason(serve: Serve) -> None:
    alone = await serve()
    member = alone.parts.config.url
    status, body = await alone.call("POST", f"/v0/leave?member={member}")
    assert (status, body) == (409, f"{member} is the only member\n".encode())
    status, body = await alone.call("POST", "/v0/leave?member=http://stranger:1")
    assert status == 409 and body.startswith(b"http://stranger:1 is not a member")
    own, gone = free_ports(2)
    members = (f"http://127.0.0.1:{own}", f"http://127.0.0.1:{gone}")
    lonely = await serve(port=own, cluster=members, timeout_ms=200)
    status, body = await lonely.call("POST", f"/v0/leave?member={members[1]}")
    assert (status, body) == (409, f"a leave needs every member; unreachable: {members[1]}\n".encode())


async def test_a_leave_is_202_with_the_version_that_has_the_member_leaving(serve: Serve) -> None:
    ports = free_ports(2)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    first, _ = [await serve(port=port, cluster=members) for port in ports]
    status, body = await first.call("POST", f"/v0/leave?member={members[1]}")
    assert status == 202, body
    change = {"kind": "leave", "member": members[1], "walker": members[1], "version": 2}
    assert as_json(body) == {"member": members[1], "membership_version": 2, "change": change}


async def test_a_remove_undoes_a_join_and_refuses_any_other_member_with_409(serve: Serve) -> None:
    *ports, ghost_port = free_ports(3)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    first, second = [await serve(port=port, cluster=members) for port in ports]
    ghost = f"http://127.0.0.1:{ghost_port}"  # claims a join and never comes
    await make_as_member(first.parts.members, first.parts.members.membership.with_joining(ghost))
    status, body = await second.call("POST", f"/v0/remove?member={members[0]}")
    assert (status, body) == (
        409,
        f"{members[0]} is a member like the others, not joining: admin leave removes it\n".encode(),
    )
    status, body = await second.call("POST", "/v0/remove?member=http://stranger:1")
    assert status == 409 and body.startswith(b"http://stranger:1 is not a member")
    status, body = await second.call("POST", f"/v0/remove?member={ghost}")
    assert status == 200, body
    assert as_json(body) == {"member": ghost, "membership_version": 3, "cluster": list(members)}
    assert first.parts.members.membership.urls == members  # the claimant took it first


async def test_a_key_s_paxos_state_is_shown_for_admin_locate(served: ServedNode) -> None:
    status, body = await served.call("GET", "/v0/paxos?id=k")
    nothing = {"promised": None, "accepted": None, "committed": None}
    assert (status, json.loads(body)) == (200, {"node": served.parts.config.url, "key": "k", **nothing})
    created = {"If-None-Match": "*"}
    async with served.session.put(f"{served.url}/v0/entity?id=k", data=b"v", headers=created) as put:
        assert put.status == 201
    status, body = await served.call("GET", "/v0/paxos?id=k")
    shown = json.loads(body)
    assert status == 200 and shown["promised"] == shown["committed"] is not None and shown["accepted"] is None
    assert await served.call("GET", "/v0/paxos") == (
        400,
        b"query parameter 'id' is required and must not be empty\n",
    )


async def test_a_replication_factor_per_datacenter_is_202_and_one_that_does_not_fit_is_400(
    serve: Serve,
) -> None:
    ports = free_ports(4)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    spread = {"cluster": members, "datacenters": ("east", "east", "west", "west"), "replication_factor": 2}
    first, *_ = [await serve(port=port, **spread) for port in ports]
    for given, reason in (
        ("east:1", b"the replication factor leaves out west (the datacenters are east, west)\n"),
        ("east:1,west:3", b"N=3 exceeds the 2 members of datacenter west\n"),
        ("east:one", b"a replication factor is N or DC:N,DC:N,...; got 'east:one'\n"),
    ):
        assert await first.call("POST", f"/v0/replication-factor?n={given}") == (400, reason)
    status, body = await first.call("POST", "/v0/replication-factor?n=east:2,west:1")
    assert status == 202, body
    assert as_json(body)["replication_factor"] == {"east": 2, "west": 1}
    assert str(first.parts.membership.next_replication) == "east:2,west:1"
    view = as_json((await first.call("GET", "/v0/cluster"))[1])
    assert (view["replication_factor"], view["next_replication_factor"]) == (2, {"east": 2, "west": 1})
    assert (view["datacenters"], [member["datacenter"] for member in view["members"]]) == (
        ["east", "east", "west", "west"], ["east", "east", "west", "west"],
    )  # fmt: skip
    assert [member["zone"] for member in view["members"]] == ["127.0.0.1"] * 4
