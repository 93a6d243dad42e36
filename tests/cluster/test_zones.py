"""Zones and datacenters with real nodes: six machines on loopback in zones of two, N = 3, keep every
key on three zones and serve quorum reads and writes with a whole zone stopped; two datacenters of three,
N = 3 in each, serve ``local_quorum`` in the one left when the other is stopped, refuse ``quorum`` and
``each_quorum`` with 504, and the stopped one holds every write once it is back; a join into one
datacenter moves keys only within it; a zone lost, and a datacenter lost, under a writer lose no
acknowledged write. Each node's datacenter and zone are as ``cluster --model-datacenters --model-zones``
gives them (kvnode.ops.cluster_config.modelled_places)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from kvnode.ops.cluster_config import machine_host
from kvnode.ops.processes import start_together
from kvnode.topology.membership import Membership
from tests.changes import Writes, copies, local_keys, newcomer, on_machines, settled, status_of
from tests.harness import Node, Response, poll, stats, wait_for

KEYS = [f"key-{i}" for i in range(40)]
BACK_S = 60.0  # for a stopped datacenter or zone, once started again, to hold what it missed


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
    # Through every east node while the west runs: a node coordinates writes once it has checked its
    # clock against a majority of all six members (kvnode.clocks.fence), which the east alone is not.
    for i, key in enumerate(KEYS[:9]):
        assert east[i % 3].put(key, b"before", ack="each_quorum").status == 201
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

    # Every east owner took every write (all three ran): any local majority reads the latest.
    latest = {key.encode(): east[0].get(key, ack="local_quorum").body for key in KEYS}
    start_together(west)
    poll(
        lambda: {node.url: stale(node, latest) for node in west},
        lambda left: not any(left.values()),
        BACK_S,
        "the datacenter started again to hold every write it missed, each at its latest version",
    )


def stale(node: Node, latest: dict[bytes, bytes]) -> list[bytes]:
    """The keys of ``latest`` that ``node`` does not hold at that version, read from its own storage."""
    held = dict(node.scan("key-", "key."))
    return [key for key, value in latest.items() if held.get(key) != value]


def test_a_join_into_one_datacenter_moves_keys_only_within_it(tmp_path: Path) -> None:
    """Two datacenters of three, N = 2 in each: a fourth member joining the second takes its keys from
    the members there; no member of the first gains or loses a key, or holds a surplus copy."""
    cluster = on_machines(tmp_path, machines=6, per_machine=1, replication=2, datacenters=2)
    keys = [f"key-{i}" for i in range(120)]
    for key in keys:
        assert cluster[0].put(key, key.encode(), ack="all").status == 201
    before = {node.url: local_keys(node) for node in cluster}
    new = newcomer(cluster, tmp_path, host=machine_host(6), datacenter="dc2")
    new.start()
    nodes, members = [*cluster.nodes, new], [*cluster.urls, new.url]
    settled(nodes, members)
    placement = Membership.from_described(status_of(new)).placement()
    assert placement.datacenter_of(new.url) == "dc2"
    takes = {key for key in keys if new.url in placement.owners(key.encode())}
    assert takes, "the newcomer owns no key (the test needs some)"
    wait_for(lambda: local_keys(new) == takes, what="the newcomer to hold exactly the keys it owns")
    east, west = cluster.nodes[:3], cluster.nodes[3:]
    # A GC pass runs once the join settled: each member counts the copies it holds and no longer owns.
    surplus = poll(
        lambda: {node.url: stats(node)["gc"]["surplus"] for node in cluster},
        lambda counts: sum(counts[node.url] for node in west) == len(takes),
        what="the displaced copies counted",
    )
    assert [surplus[node.url] for node in east] == [0, 0, 0]
    changed = [node.url for node in cluster if local_keys(node) != before[node.url]]
    assert changed == []  # surplus copies stay until their grace period or admin cleanup
    for node in west:
        owned = {key for key in keys if node.url in placement.owners(key.encode())}
        assert surplus[node.url] == len(before[node.url] - owned), node.url


class Overwriter(Writes):
    """Writes versions 0, 1, 2, ... of :data:`KEYS`, each key in turn (version v to key v mod len(KEYS)),
    through the next of ``coordinators`` at ``ack``, until stopped; keeps the latest version acknowledged
    of each key."""

    limit = 20_000

    def __init__(self, coordinators: Sequence[Node], ack: str) -> None:
        super().__init__()
        self.acknowledged: dict[str, int] = {}
        self.count = 0  # writes acknowledged
        self._coordinators, self._ack = coordinators, ack

    def write(self, version: int) -> None:
        key = KEYS[version % len(KEYS)]
        coordinator = self._coordinators[version % len(self._coordinators)]
        with contextlib.suppress(OSError):  # a connection lost: not acknowledged, maybe stored
            if coordinator.put(key, str(version).encode(), ack=self._ack).status == 201:
                self.acknowledged[key] = version
                self.count += 1

    def acknowledges(self, more: int, while_: str) -> None:
        """Wait until ``more`` writes more are acknowledged."""
        wanted = self.count + more
        wait_for(lambda: self.count >= wanted, seconds=60, what=f"{more} writes acknowledged {while_}")


def lost_under(writer: Overwriter, nodes: Sequence[Node], what: str) -> None:
    """``nodes`` killed while ``writer`` writes, then started again, with writes acknowledged before,
    while they are down, and once they are back."""
    writer.acknowledges(40, f"before {what} is lost")
    for node in nodes:
        node.kill()
    writer.acknowledges(80, f"with {what} lost")
    start_together(nodes)
    writer.acknowledges(40, "once it is back")


def lost(acknowledged: dict[str, int], read: Callable[[str], Response]) -> dict[str, str]:
    """The acknowledged writes that ``read`` does not show, by key: the key not found (deleted back), or
    found at a version older than its latest acknowledged one, or at a version never written to it."""
    problems = {}
    for key, version in acknowledged.items():
        answer = read(key)
        if answer.status != 200:
            problems[key] = f"{answer.status}, acknowledged version {version}"
        elif not answer.body.isdigit() or int(answer.body) % len(KEYS) != KEYS.index(key):
            problems[key] = f"{answer.body!r}, never written to it"
        elif int(answer.body) < version:
            problems[key] = f"version {int(answer.body)}, older than the acknowledged {version}"
    return problems


def test_the_count_back_finds_a_key_deleted_back_an_older_version_and_a_stranger() -> None:
    acknowledged = {KEYS[0]: 40, KEYS[1]: 81, KEYS[2]: 2, KEYS[3]: 3}
    answers = {
        KEYS[0]: Response(404, b"", {}),
        KEYS[1]: Response(200, b"41", {}),  # the version acknowledged before
        KEYS[2]: Response(200, b"3", {}),  # another key's version
        KEYS[3]: Response(200, b"43", {}),  # a later write, not acknowledged (a 504) but stored: fine
    }
    assert lost(acknowledged, answers.__getitem__) == {
        KEYS[0]: "404, acknowledged version 40",
        KEYS[1]: "version 41, older than the acknowledged 81",
        KEYS[2]: "b'3', never written to it",
    }


def test_a_zone_lost_under_a_writer_at_quorum_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """Six machines in zones of two, N = 3: both machines of a zone killed while a writer writes at
    quorum through the others, then started again; every write acknowledged reads back through every
    member at its version or a later one."""
    cluster = on_machines(tmp_path, machines=6, per_machine=1, replication=3, zones=3)
    membership = Membership.from_described(status_of(cluster[0]))
    zone = dict(zip(membership.urls, membership.zones, strict=True))
    lost_zone = [node for node in cluster if zone[node.url] == "z1"]
    others = [node for node in cluster if node not in lost_zone]
    with Overwriter(others, "quorum") as writer:
        lost_under(writer, lost_zone, "the zone")
    for node in cluster:
        assert lost(writer.acknowledged, partial(node.get, ack="quorum")) == {}, node.url


def test_a_datacenter_lost_under_a_writer_at_local_quorum_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """Two datacenters of three, N = 3 in each: the second killed while a writer writes at local_quorum
    through the first, then started again; every write acknowledged reads back at local_quorum in the
    first at once, and in the second once it holds what it missed (each of its members, from its own
    storage)."""
    cluster = on_machines(tmp_path, machines=6, per_machine=1, replication=3, datacenters=2)
    east, west = cluster.nodes[:3], cluster.nodes[3:]
    with Overwriter(east, "local_quorum") as writer:
        lost_under(writer, west, "the datacenter")
    for node in east:
        assert lost(writer.acknowledged, partial(node.get, ack="local_quorum")) == {}, node.url
    for node in west:
        poll(
            partial(lost, writer.acknowledged, partial(stored, node)),
            lambda problems: problems == {},
            BACK_S,
            f"{node.url} to hold every acknowledged write",
        )


def stored(node: Node, key: str) -> Response:
    """``key`` as ``node``'s own storage holds it (200 and its value, or 404)."""
    held = node.scan(key, key + "\x00")
    return Response(200, held[0][1], {}) if held else Response(404, b"", {})
