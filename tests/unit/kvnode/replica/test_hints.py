"""kvnode.replica.hints.HintStore on real LevelDB (the hints part of a SystemDb in a temporary directory):
what is kept, counted, listed, expired (or no longer owned by its target) and forgotten, and what a
restart finds; and HintDelivery to a scripted target, which waits while the node's loop is busy; and on
nodes served in this process, a whole datacenter down within the hint window given every write it missed
once it is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kvnode.loop_lag import Starvation
from kvnode.memory import Settler
from kvnode.ops.ports import free_ports
from kvnode.replica.hints import Hint, HintDelivery, HintStore
from kvnode.storage.records import Record, encode
from kvnode.storage.system_db import SystemDb
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership
from tests.drivers import Serve, until
from tests.harness import eventually

B, C = "http://b:8080", "http://c:8080"
WINDOW_S = 10.0
GRACE_S = 20.0


@pytest.fixture
def wall() -> list[int]:
    """The wall clock in milliseconds, as the hint store reads it: wall[0], moved by the test alone."""
    return [1_000_000]


def hint_store(system: SystemDb, wall: list[int], max_per_peer: int = 100) -> HintStore:
    return HintStore(
        system.hints,
        fsync=False,
        max_per_peer=max_per_peer,
        window_s=WINDOW_S,
        grace_s=GRACE_S,
        wall_ms=lambda: wall[0],
    )


def test_hints_are_kept_in_order_per_target(system_db: SystemDb, wall: list[int]) -> None:
    store = hint_store(system_db, wall)
    assert store.add(B, b"k1", Record.put(1, b"v1"), down_for=0.0) == 1
    wall[0] += 5
    assert store.add(C, b"k2", Record.put(2, b"v2"), down_for=0.0) == 2
    assert store.add(B, b"k3", Record.delete(3), down_for=0.0) == 3
    assert store.oldest(B, 10) == [
        Hint(1, 1_000_000, b"k1", Record.put(1, b"v1")),
        Hint(3, 1_000_005, b"k3", Record.delete(3)),
    ]
    assert (store.pending(B), store.pending(C)) == (2, 1)
    assert store.kept == {B: 2, C: 1}


def test_oldest_stops_at_the_limit_or_the_bytes_but_takes_one_hint_at_least(
    system_db: SystemDb, wall: list[int]
) -> None:
    store = hint_store(system_db, wall)
    for n in range(5):
        store.add(B, b"k%d" % n, Record.put(n + 1, b"x" * 100), down_for=0.0)
    one_hint_bytes = 8 + 4 + len(b"k0") + len(encode(Record.put(1, b"x" * 100)))  # created | key length
    assert [hint.seq for hint in store.oldest(B, 3)] == [1, 2, 3]
    assert [hint.seq for hint in store.oldest(B, 10, max_bytes=1)] == [1]
    assert [hint.seq for hint in store.oldest(B, 10, max_bytes=2 * one_hint_bytes)] == [1, 2]
    assert [hint.seq for hint in store.oldest(B, 10, max_bytes=2 * one_hint_bytes + 1)] == [1, 2, 3]


def test_a_target_at_the_cap_gets_no_more_hints(system_db: SystemDb, wall: list[int]) -> None:
    store = hint_store(system_db, wall, max_per_peer=2)
    assert store.add(B, b"k1", Record.put(1, b"v"), down_for=0.0)
    assert store.add(B, b"k2", Record.put(2, b"v"), down_for=0.0)
    assert store.add(B, b"k3", Record.put(3, b"v"), down_for=0.0) == 0
    assert store.add(C, b"k3", Record.put(3, b"v"), down_for=0.0)  # the cap is per target
    assert store.pending(B) == 2
    assert store.dropped == {"full": 1}


def test_a_target_down_longer_than_the_window_gets_no_hint(system_db: SystemDb, wall: list[int]) -> None:
    store = hint_store(system_db, wall)
    assert store.add(B, b"k", Record.put(1, b"v"), down_for=WINDOW_S + 0.001) == 0
    assert store.add(B, b"k", Record.put(1, b"v"), down_for=WINDOW_S) == 1
    assert store.dropped == {"window": 1}
    assert store.pending(B) == 1


def test_a_hint_expires_once_older_than_the_window(system_db: SystemDb, wall: list[int]) -> None:
    store = hint_store(system_db, wall)
    store.add(B, b"k", Record.put(wall[0] * 1000, b"v"), down_for=0.0)
    [hint] = store.oldest(B, 1)
    wall[0] += int(WINDOW_S * 1000)
    assert store.stale(hint, B) is None
    wall[0] += 1
    assert store.stale(hint, B) == "expired"


def test_a_hint_whose_record_is_older_than_the_grace_period_is_never_delivered(
    system_db: SystemDb, wall: list[int]
) -> None:
    store = hint_store(system_db, wall)
    stamped_ms = wall[0] - int(GRACE_S * 1000)  # a record stamped long before the hint was kept
    store.add(B, b"k", Record.delete(stamped_ms * 1000), down_for=0.0)
    [hint] = store.oldest(B, 1)
    assert store.stale(hint, B) is None
    wall[0] += 1
    assert store.stale(hint, B) == "grace"


def test_a_hint_whose_target_no_longer_owns_its_key_is_dropped_once_the_membership_settled(
    system_db: SystemDb, wall: list[int]
) -> None:
    store = hint_store(system_db, wall)
    a = "http://a:8080"
    settled = Membership.seeded([a, B, C], 2)
    placement = settled.placement()
    key = next(b"k%d" % i for i in range(100) if B not in placement.owners(b"k%d" % i))
    store.add(B, key, Record.put(wall[0] * 1000, b"v"), down_for=0.0)
    [hint] = store.oldest(B, 1)
    assert store.stale(hint, B) is None  # no membership told yet
    joining = Membership.seeded([a, B], 2).with_joining(C)  # B owns every key, C joins
    store.use(Epoch(a, joining, {}, since=1))
    assert store.stale(hint, B) is None  # a change under way: B is still an owner
    store.use(Epoch(a, settled, {}, since=2))
    assert store.stale(hint, B) == "unowned"
    owned = Record.put(wall[0] * 1000, b"v", copies=1)  # written to one replica: the first owner's
    assert store.stale(Hint(2, wall[0], key, owned), placement.owners(key)[0]) is None


def test_a_hint_removed_twice_is_counted_once(system_db: SystemDb, wall: list[int]) -> None:
    store = hint_store(system_db, wall)
    first = store.add(B, b"k1", Record.put(1, b"v"), down_for=0.0)
    second = store.add(B, b"k2", Record.put(2, b"v"), down_for=0.0)
    store.remove(B, [first])
    store.remove(B, [first, second])
    assert store.pending(B) == 0
    assert store.oldest(B, 10) == []
    assert store.pending_by_target() == {}


def test_pending_by_target_names_only_targets_with_hints(system_db: SystemDb, wall: list[int]) -> None:
    store = hint_store(system_db, wall)
    store.add(B, b"k", Record.put(1, b"v"), down_for=0.0)
    seq = store.add(C, b"k", Record.put(1, b"v"), down_for=0.0)
    store.remove(C, [seq])
    assert store.pending_by_target() == {B: 1}


def test_a_restart_finds_the_hints_and_numbers_on_after_them(tmp_path: Path, wall: list[int]) -> None:
    system = SystemDb.open(tmp_path / "node")
    store = hint_store(system, wall)
    for n in range(3):
        store.add(B, b"k%d" % n, Record.put(n + 1, b"v"), down_for=0.0)
    store.add(C, b"k", Record.put(9, b"v"), down_for=0.0)
    system.close()

    system = SystemDb.open(tmp_path / "node")
    try:
        restarted = hint_store(system, wall)
        assert restarted.pending_by_target() == {B: 3, C: 1}
        assert restarted.kept == {}  # counted since start
        assert restarted.add(B, b"k", Record.put(10, b"v"), down_for=0.0) == 5
        assert [hint.key for hint in restarted.oldest(B, 10)] == [b"k0", b"k1", b"k2", b"k"]
    finally:
        system.close()


def test_hints_stay_in_their_part(system_db: SystemDb, wall: list[int]) -> None:
    system_db.clock_floor.persist(123)
    store = hint_store(system_db, wall)
    store.add(B, b"k", Record.put(1, b"v"), down_for=0.0)
    assert system_db.clock_floor.load() == 123
    assert store.pending_by_target() == {B: 1}  # the floor is not taken for a hint


class ConnectedTarget:
    """A peer that is connected and takes every hint at once, keeping their keys."""

    url = B
    connected = True

    def __init__(self) -> None:
        self.became_connected = asyncio.Event()
        self.became_connected.set()
        self.delivered: list[bytes] = []

    def probe(self) -> None:
        """Connected already."""

    def deliver_hint(self, key: bytes, record: Record) -> asyncio.Future[int | None]:
        self.delivered.append(key)
        taken: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        taken.set_result(None)
        return taken


async def test_delivery_waits_while_the_loop_is_busy_and_goes_on_once_it_is_calm(
    system_db: SystemDb, wall: list[int]
) -> None:
    store = hint_store(system_db, wall)
    store.add(B, b"k", Record.put(wall[0] * 1000, b"v"), down_for=0.0)
    starvation = Starvation()
    starvation.observe(0.5, now=1.0)  # the loop's last tick was half a second late: busy
    target = ConnectedTarget()
    delivery = HintDelivery(store, target, 1000.0, Settler(), starvation)
    delivery.start()
    for _ in range(50):  # turns of the loop in which a delivery not waiting would have sent the hint
        await asyncio.sleep(0)
    assert target.delivered == []
    starvation.observe(0.001, now=1.01)  # a calm tick
    await until(lambda: store.pending(B) == 0, "the hint delivered")
    assert target.delivered == [b"k"]
    await delivery.stop()


async def test_a_datacenter_down_within_the_window_is_given_every_write_it_missed_once_back(
    serve: Serve,
) -> None:
    """Two datacenters of two, N = 2 in each, the west not started: the east's local_quorum writes keep a
    hint for each west owner (hinted at dispatch: not connected), and once the west starts every one is
    delivered (no forwarder there to relay them: each owner is sent its own)."""
    ports = free_ports(4)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    spread = {"datacenters": ("east", "east", "west", "west"), "replication_factor": 2, "timeout_ms": 500}
    east = [await serve(port=port, cluster=members, **spread) for port in ports[:2]]
    assert await east[0].parts.peers[0].reach(5.0)
    east[0].clock_checked()  # as if the west had answered a clock call before it went down
    coordinator = east[0].parts.coordinator
    keys = [f"key-{n}".encode() for n in range(10)]
    written = {
        key: await coordinator.put(key, b"v", coordinator.quorum("local_quorum", None)) for key in keys
    }
    west_urls = members[2:]
    assert east[0].parts.hints.pending_by_target() == dict.fromkeys(west_urls, len(keys))
    west = [await serve(port=port, cluster=members, **spread) for port in ports[2:]]
    await eventually(lambda: east[0].parts.hints.pending_by_target() == {}, what="every hint delivered")
    for node in west:
        assert {key: node.parts.storage.read(key) for key in keys} == written, node.url
