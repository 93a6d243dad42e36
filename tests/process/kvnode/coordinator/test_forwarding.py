"""kvnode.coordinator.forwarding on real node processes: two datacenters of two machines (loopback
addresses, as ``cluster --machines --model-datacenters`` lays them out), N = 2 in each. Every write one
node of the first coordinates crosses to the second once: its /metrics count one replica call to the
second datacenter a write, a ``forward``, and no write to either owner there; the forwarder's own count one
relayed write to the other owner; and every owner holds every key."""

from __future__ import annotations

from pathlib import Path

from kvnode.topology.membership import Membership
from tests.changes import copies, on_machines, status_of
from tests.harness import scrape, total

KEYS = [f"key-{n}" for n in range(20)]


def test_a_write_crosses_to_the_other_datacenter_once(tmp_path: Path) -> None:
    cluster = on_machines(tmp_path, machines=4, per_machine=1, replication=2, datacenters=2)
    membership = Membership.from_described(status_of(cluster[0]))
    datacenter = dict(zip(membership.urls, membership.datacenters, strict=True))
    coordinator = cluster[0]
    west = [node for node in cluster if datacenter[node.url] != datacenter[coordinator.url]]
    assert len(west) == 2
    for key in KEYS:
        assert coordinator.put(key, key.encode(), ack="each_quorum").status == 201, key

    calls = scrape(coordinator)
    crossings = {
        op: sum(total(calls, "kvnode_replica_calls_total", peer=node.url, op=op) for node in west)
        for op in ("forward", "write")
    }
    assert crossings == {"forward": len(KEYS), "write": 0}  # one call to the other datacenter a write
    first, second = west
    relayed = total(scrape(first), "kvnode_replica_calls_total", peer=second.url, op="write") + total(
        scrape(second), "kvnode_replica_calls_total", peer=first.url, op="write"
    )
    assert relayed == len(KEYS)
    assert all(len(holders) == 4 for holders in copies(cluster.nodes, KEYS).values())
