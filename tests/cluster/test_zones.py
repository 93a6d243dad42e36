"""Zones and datacenters with real nodes: six machines on loopback in zones of two, N = 3, keep every
key on three zones and serve quorum reads and writes with a whole zone stopped; two datacenters of three,
N = 3 in each, serve ``local_quorum`` in the one left when the other is stopped, and refuse ``quorum`` and
``each_quorum`` with 504. Each node's datacenter and zone are as ``cluster --model-datacenters
--model-zones`` gives them (kvnode.ops.cluster_config.modelled_places)."""

from __future__ import annotations

from pathlib import Path

from kvnode.topology.membership import Membership
from tests.changes import copies, on_machines, status_of

KEYS = [f"key-{i}" for i in range(40)]


def test_with_three_zones_of_two_and_n_3_every_key_is_on_three_zones_and_a_zone_can_be_lost(
    tmp_path: Path,
) -> None:
    cluster = on_machines(tmp_path, machines=6, per_machine=1, replication=3, zones=3)
    membership = Membership.from_described(status_of(cluster[0]))
    zone = dict(zip(membership.urls, membership.zones, strict=True))
    assert sorted(membership.zones) == ["z1", "z1", "z2", "z2", "z3", "z3"]
    for i, key in enumerate(KEYS):
        assert cluster[i % 6].put(key, key.encode(), ack=3).status == 201  # every owner holds it
    for key, holders in copies(cluster.nodes, KEYS).items():
        assert sorted(zone[url] for url in holders) == ["z1", "z2", "z3"], (key, holders)

    stopped = [node for node in cluster if zone[node.url] == "z1"]
    for node in stopped:
        node.stop()
    alive = [node for node in cluster if node not in stopped]
    for i, key in enumerate(KEYS):
        coordinator = alive[i % len(alive)]
        assert coordinator.get(key).body == key.encode(), key  # ack = 2 of the 3 owners
        assert coordinator.put(key, b"again").status == 201, key
        assert coordinator.get(key, ack="quorum").body == b"again", key


def test_with_one_datacenter_stopped_local_quorum_serves_in_the_other_and_quorum_and_each_quorum_are_504(
    tmp_path: Path,
) -> None:
    cluster = on_machines(tmp_path, machines=6, per_machine=1, replication=3, datacenters=2)
    view = status_of(cluster[0])
    assert (view["datacenters"], view["replication_factor"]) == (["dc1"] * 3 + ["dc2"] * 3, 3)
    east, west = cluster.nodes[:3], cluster.nodes[3:]
    for key in KEYS[:10]:
        assert east[0].put(key, b"before", ack="each_quorum").status == 201
    for node in west:
        node.stop()
    for i, key in enumerate(KEYS):
        coordinator = east[i % 3]
        assert coordinator.put(key, b"local", ack="local_quorum").status == 201, key
        assert coordinator.get(key, ack="local_quorum").body == b"local", key
    coordinator = east[1]
    for level in ("quorum", "each_quorum"):
        assert coordinator.put(KEYS[0], b"everywhere", ack=level).status == 504, level
        assert coordinator.get(KEYS[0], ack=level).status == 504, level
    assert coordinator.get(KEYS[0], ack="local_quorum").body in (b"local", b"everywhere")
