"""A node's parts as one value (kvnode.node.parts) on nodes served in this process: the membership and
peers it runs with, reached through its Members, and the one snapshot of its figures, which reads the parts
it names."""

from __future__ import annotations

from kvnode.ops.ports import free_ports
from tests.drivers import Serve, ServedNode
from tests.harness import eventually


async def test_a_node_of_one_has_no_peers_and_a_quiet_snapshot(served: ServedNode) -> None:
    parts = served.parts
    assert parts.membership is parts.members.membership and parts.membership.urls == (parts.config.url,)
    assert parts.peers == []
    snapshot = parts.snapshot()
    assert snapshot.peers == () and snapshot.reading("hints").json()["pending"] == {}
    assert snapshot.reading("membership").json() == {"version": 1, "undone": ""}
    assert snapshot.reading("change").json() == {"streamed": 0}  # this node's part in changes
    shed = {"requests": 0, "bytes": 0, "starved": 0}
    assert snapshot.reading("requests").json() == {
        "inflight": 0,
        "shed": shed,
        "starved": False,
        "inflight_bytes": 0,
    }
    assert snapshot.reading("rebuild").json()["state"] == "serving"


async def test_the_snapshot_names_each_peer_and_the_hints_kept_for_it(serve: Serve) -> None:
    own, gone = free_ports(2)
    members = (f"http://127.0.0.1:{own}", f"http://127.0.0.1:{gone}")
    node = await serve(port=own, cluster=members, timeout_ms=200)
    parts = node.parts
    node.clock_checked()  # the peer answered once, then went down
    assert [peer.url for peer in parts.peers] == [members[1]]
    status, body = await node.call("PUT", "/v0/entity?id=k&ack=1", b"v")
    assert status == 201, body
    await eventually(
        lambda: parts.snapshot().reading("hints").json()["pending"] == {members[1]: 1}, what="the hint kept"
    )
    snapshot = parts.snapshot()
    assert snapshot.peer_urls == [members[1]]
    assert snapshot.reading("hints").json()["kept"] == {members[1]: 1}
    assert snapshot.reading("summaries").json()["summaries_ready"] == parts.summaries.ready.is_set()
