"""An operator's endpoints (kvnode.node.stats): on real nodes, /v0/stats, /v0/cluster and /metrics read one
snapshot, so they agree, and their JSON ends with a newline; on nodes served in this process, /v0/cluster
names the claimant and the change under way, and the member that walks it says its part until the version
past it."""

from __future__ import annotations

import json
from typing import Any

from kvnode.ops.ports import free_ports
from tests.drivers import Serve, ServedNode
from tests.harness import eventually


async def cluster_of(node: ServedNode) -> Any:
    status, body = await node.call("GET", "/v0/cluster")
    assert status == 200, body
    return json.loads(body)


async def test_the_cluster_view_names_the_claimant_and_the_change_its_walker_says_its_part(
    serve: Serve,
) -> None:
    ports = free_ports(3)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    first, _, third = [await serve(port=port, cluster=members, timeout_ms=100) for port in ports]
    view = await cluster_of(third)
    assert (view["claimant"], view["change"], view["own_part"]) == (members[0], None, None)

    status, body = await first.call("POST", f"/v0/leave?member={members[2]}")
    assert status == 202, body
    change = {"kind": "leave", "member": members[2], "walker": members[2], "version": 2}
    assert json.loads(body)["change"] == change
    assert (await cluster_of(first))["change"] == change  # every member says it; its walker, its part
    await eventually(lambda: third.parts.own_part.progress.step is None, what="the leave walked")

    left = await cluster_of(third)  # the membership without it, which it stored: the change ended
    assert (left["membership_version"], left["cluster"], left["change"]) == (3, list(members[:2]), None)
    assert left["own_part"] == {"version": 2, "step": "done", "streamed": 0}
    assert (await cluster_of(first))["own_part"] is None  # it walked none
