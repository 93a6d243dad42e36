"""kvnode.topology.placement: rendezvous placement is deterministic, prefix-stable, balanced and moves
little."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from functools import partial

import pytest

from kvnode.topology.placement import Placement, host_of, replicas_for

NODES = ["http://127.0.0.1:8080", "http://127.0.0.1:8081", "http://127.0.0.1:8082"]
FIVE_NODES = [*NODES, "http://127.0.0.1:8083", "http://127.0.0.1:8084"]
SAMPLE_KEYS = [
    b"",
    b"a",
    b"user:42",
    "ключ".encode(),
    b"\x00\xff" * 40,
    *(f"k{i}".encode() for i in range(200)),
]


def random_keys(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(1, 24)) for _ in range(count)]


def primaries(placement: Placement, keys: list[bytes]) -> list[str]:
    return [placement.order(key)[0] for key in keys]


def test_same_order_from_independent_instances() -> None:
    first, second = Placement(NODES), Placement(list(NODES))
    for key in SAMPLE_KEYS:
        assert first.order(key) == second.order(key)
        assert replicas_for(key, NODES, 2) == first.replicas_for(key, 2)


@pytest.mark.parametrize("nodes", [NODES[:1], NODES[:2], NODES, FIVE_NODES], ids=lambda n: f"{len(n)}-nodes")
def test_smaller_from_is_a_prefix_of_a_larger_one(nodes: list[str]) -> None:
    placement = Placement(nodes)
    for key in SAMPLE_KEYS:
        full = placement.replicas_for(key, len(nodes))
        assert full == placement.order(key)
        for n in range(1, len(nodes) + 1):
            assert placement.replicas_for(key, n) == full[:n]
        if len(nodes) >= 3:
            assert placement.replicas_for(key, 2) == placement.replicas_for(key, 3)[:2]


@pytest.mark.parametrize("nodes", [NODES[:1], NODES, FIVE_NODES], ids=lambda n: f"{len(n)}-nodes")
def test_every_node_appears_once_in_order(nodes: list[str]) -> None:
    placement = Placement(nodes)
    for key in SAMPLE_KEYS:
        order = placement.order(key)
        assert len(order) == len(nodes)
        assert sorted(order) == sorted(nodes)


def test_order_does_not_depend_on_the_list_order() -> None:
    """Every node is given the same list, but the ranking itself is a function of (key, url) only."""
    forward, backward = Placement(NODES), Placement(NODES[::-1])
    for key in SAMPLE_KEYS:
        assert forward.order(key) == backward.order(key)


def test_three_nodes_share_primaries_evenly() -> None:
    keys = random_keys(30_000, seed=7)
    counts = Counter(primaries(Placement(NODES), keys))
    assert set(counts) == set(NODES)
    for node, count in counts.items():
        share = count / len(keys)
        assert abs(share - 1 / 3) <= 0.02, f"{node} is primary for {share:.3%} of keys"


def test_every_replica_position_is_balanced() -> None:
    keys = random_keys(15_000, seed=11)
    placement = Placement(NODES)
    orders = [placement.order(key) for key in keys]
    for position in range(len(NODES)):
        counts = Counter(order[position] for order in orders)
        for node in NODES:
            assert abs(counts[node] / len(keys) - 1 / 3) <= 0.025, (position, node, counts)


def test_adding_a_fourth_node_moves_about_a_quarter_of_keys_and_only_to_it() -> None:
    keys = random_keys(30_000, seed=3)
    new_node = "http://127.0.0.1:9090"
    before = Placement(NODES)
    after = Placement([*NODES, new_node])
    moved = 0
    for key in keys:
        old_order, new_order = before.order(key), after.order(key)
        if new_order[0] != old_order[0]:
            moved += 1
            assert new_order[0] == new_node, "a key moved between two old nodes"
        # The old nodes keep their relative order: the newcomer is only inserted.
        assert [url for url in new_order if url != new_node] == old_order
    assert 0.20 <= moved / len(keys) <= 0.30, f"{moved / len(keys):.3%} of keys changed primary"


def test_removing_a_node_moves_only_its_keys() -> None:
    keys = random_keys(5_000, seed=5)
    full, reduced = Placement(NODES), Placement(NODES[:2])
    for key in keys:
        old_primary = full.order(key)[0]
        if old_primary != NODES[2]:
            assert reduced.order(key)[0] == old_primary


@pytest.mark.parametrize("n", [0, -1, 4, 100])
def test_invalid_replica_count_raises(n: int) -> None:
    placement = Placement(NODES)
    with pytest.raises(ValueError, match="n must be between 1 and 3"):
        placement.replicas_for(b"key", n)
    with pytest.raises(ValueError):
        replicas_for(b"key", NODES, n)


def test_empty_or_duplicate_node_lists_are_rejected() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        Placement([])
    with pytest.raises(ValueError, match="distinct"):
        Placement([NODES[0], NODES[1], NODES[0]])


def test_len_is_the_cluster_size() -> None:
    assert len(Placement(FIVE_NODES)) == 5
    assert Placement(NODES[:1]).replicas_for(b"anything", 1) == NODES[:1]


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_join_displaces_at_most_the_last_of_a_keys_owners(replicas: int) -> None:
    """What streaming on a join relies on: for every key, the owners after a join are the owners before
    it with the new node inserted somewhere and at most the last one pushed out; no other owner changes."""
    before, after = Placement(FIVE_NODES), Placement([*FIVE_NODES, "http://127.0.0.1:8085"])
    displaced = 0
    for key in random_keys(5_000, seed=18):
        old, new = before.replicas_for(key, replicas), after.replicas_for(key, replicas)
        kept = [url for url in new if url != "http://127.0.0.1:8085"]
        assert kept == old[: len(kept)], (key, old, new)
        displaced += len(kept) < len(old)
    assert 0.9 * 5_000 * replicas / 6 < displaced < 1.1 * 5_000 * replicas / 6


def test_a_node_with_another_url_and_the_same_token_takes_exactly_the_place() -> None:
    replaced = "http://127.0.0.1:8082"
    tokens = [*NODES[:2], replaced]
    placement = Placement([*NODES[:2], "http://127.0.0.1:9000"], tokens)
    for key in SAMPLE_KEYS:
        old = Placement(NODES).order(key)
        assert placement.order(key) == [url if url != replaced else "http://127.0.0.1:9000" for url in old]


def test_tokens_must_be_one_per_node_and_distinct() -> None:
    with pytest.raises(ValueError, match="token of its own"):
        Placement(NODES, NODES[:2])
    with pytest.raises(ValueError, match="token of its own"):
        Placement(NODES, [NODES[0]] * 3)


# --- host-aware placement: several nodes per machine ----------------------------------------------------

# Three machines (distinct loopback addresses) of two nodes each, one per core.
MACHINES = [f"http://127.0.0.{host}:{port}" for host in (1, 2, 3) for port in (8080, 8081)]


def hosts_of(urls: list[str]) -> set[str]:
    return {host_of(url) for url in urls}


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_keys_replicas_are_on_distinct_hosts_when_there_are_enough(replicas: int) -> None:
    placement = Placement(MACHINES)
    assert placement.hosts == 3
    for key in [*SAMPLE_KEYS, *random_keys(2_000, seed=21)]:
        assert len(hosts_of(placement.replicas_for(key, replicas))) == replicas, key


def test_beyond_the_hosts_every_host_holds_a_replica_and_the_order_stays_a_prefix() -> None:
    placement = Placement(MACHINES)
    for key in SAMPLE_KEYS:
        order = placement.order(key)
        assert sorted(order) == sorted(MACHINES)
        assert hosts_of(order[:3]) == hosts_of(MACHINES)
        for n in range(1, len(MACHINES) + 1):
            assert placement.replicas_for(key, n) == order[:n]


def test_host_aware_order_keeps_every_node_balanced() -> None:
    placement = Placement(MACHINES)
    keys = random_keys(12_000, seed=22)
    for position in range(3):
        counts = Counter(placement.order(key)[position] for key in keys)
        assert set(counts) == set(MACHINES)
        assert all(0.85 * 2_000 < count < 1.15 * 2_000 for count in counts.values()), (position, counts)


def test_one_node_per_host_or_one_host_is_plain_rendezvous_order() -> None:
    """Host-aware placement changes nothing for the clusters that ran before it."""
    spread = [f"http://127.0.0.{host}:8080" for host in range(1, 6)]
    for nodes in (spread, FIVE_NODES):
        placement = Placement(nodes)
        for key in SAMPLE_KEYS:
            assert placement.order(key) == sorted(nodes, key=partial(_score, key=key), reverse=True)


def _score(url: str, key: bytes) -> tuple[bytes, str]:
    """A node's rendezvous score for a key, written out."""
    hasher = hashlib.blake2b(digest_size=8, key=hashlib.blake2b(url.encode()).digest()[:32])
    hasher.update(key)
    return hasher.digest(), url


@pytest.mark.parametrize("joining", ["http://127.0.0.4:8080", "http://127.0.0.2:8082"])
@pytest.mark.parametrize("replicas", [2, 3, 4])
def test_a_join_on_any_host_changes_at_most_one_owner_of_a_key(replicas: int, joining: str) -> None:
    """A new machine, or one more node on a machine: each key's owners gain at most the new node and lose
    at most one (the join's stream, a repair with every member, is by sets; tests/cluster/test_join.py)."""
    before, after = Placement(MACHINES), Placement([*MACHINES, joining])
    moved = 0
    for key in random_keys(3_000, seed=23):
        old, new = set(before.replicas_for(key, replicas)), set(after.replicas_for(key, replicas))
        assert new - old <= {joining}, (key, old, new)
        assert len(old - new) == len(new - old)
        moved += joining in new
    assert moved > 0


def test_a_replacement_on_another_machine_keeps_the_place_of_the_one_it_replaces() -> None:
    """Its token (the URL its predecessor first joined with) keeps the predecessor's host too."""
    dead = MACHINES[3]
    urls = [url if url != dead else "http://127.0.0.9:9000" for url in MACHINES]
    placement = Placement(urls, MACHINES)
    for key in SAMPLE_KEYS:
        old = Placement(MACHINES).order(key)
        assert placement.order(key) == [url if url != dead else "http://127.0.0.9:9000" for url in old]


def test_a_cached_order_is_the_order_and_a_caller_cannot_change_it() -> None:
    placement = Placement(MACHINES)
    first = placement.replicas_for(b"user:42", 3)
    first.reverse()  # a caller's list is its own: the cached order does not move
    assert placement.replicas_for(b"user:42", 3) == placement.order(b"user:42")[:3]
    assert placement.replicas_for(b"user:42", 2) == placement.order(b"user:42")[:2]


def test_the_order_cache_is_bounded_in_keys_and_skips_long_keys() -> None:
    placement = Placement(MACHINES)
    long_key = b"k" * 129
    assert placement.replicas_for(long_key, 3) == placement.order(long_key)[:3]
    for number in range(20_000):
        key = b"key-%d" % number
        assert placement.replicas_for(key, 1) == placement.order(key)[:1]
    cached = placement._orders  # the cache itself: what it holds is the point of this test
    assert 0 < len(cached) <= 16_384
    assert long_key not in cached


# --- owners: the first N of a key's order ---------------------------------------------------------------


def test_a_keys_owners_are_the_first_n_of_its_order_on_distinct_hosts() -> None:
    placement = Placement(MACHINES, replication=3)
    assert (placement.replication, placement.everyone_owns) == (3, False)
    for key in [*SAMPLE_KEYS, *random_keys(1_000, seed=31)]:
        owners = placement.owners(key)
        assert owners == placement.order(key)[:3] and len(hosts_of(owners)) == 3, key
        assert placement.owners(key, copies=2) == owners[:2]  # a record written to fewer: a prefix
        assert placement.owners(key, copies=5) == owners  # never more than N


def test_each_member_owns_about_n_over_members_of_the_keys() -> None:
    placement = Placement(MACHINES, replication=3)
    keys = random_keys(6_000, seed=32)
    counts = Counter(url for key in keys for url in placement.owners(key))
    expected = len(keys) * 3 / len(MACHINES)  # half of the keys each
    assert all(0.9 * expected < counts[url] < 1.1 * expected for url in MACHINES), counts


def test_n_above_the_members_or_unset_makes_every_member_an_owner() -> None:
    for placement in (Placement(NODES, replication=5), Placement(NODES)):
        assert (placement.replication, placement.everyone_owns) == (3, True)
        assert sorted(placement.owners(b"user:42")) == sorted(NODES)
    with pytest.raises(ValueError, match="at least 1"):
        Placement(NODES, replication=-1)


SIX_ON_ONE_HOST = [f"http://127.0.0.1:{port}" for port in range(8080, 8086)]


@pytest.mark.parametrize(
    ("members", "joining", "share"),
    [
        (SIX_ON_ONE_HOST, "http://127.0.0.1:8086", 3 / 7),  # plain rendezvous: N/(members+1)
        # Three machines, N = 3: every machine holds one copy of every key, so a third node on one
        # machine takes a third of that machine's copies, not 3/7.
        (MACHINES, "http://127.0.0.2:8082", 1 / 3),
    ],
)
def test_a_join_with_n_3_moves_the_newcomers_share_each_key_from_one_displaced_owner(
    members: list[str], joining: str, share: float
) -> None:
    before = Placement(members, replication=3)
    after = Placement([*members, joining], replication=3)
    keys = random_keys(7_000, seed=33)
    gained = 0
    for key in keys:
        old, new = set(before.owners(key)), set(after.owners(key))
        assert new - old <= {joining} and len(old - new) == len(new - old), key
        gained += len(new - old)
    assert 0.9 * share * len(keys) < gained < 1.1 * share * len(keys)


# --- zones and datacenters ------------------------------------------------------------------------------


def host_aware_order(nodes: list[str], tokens: list[str], key: bytes) -> list[str]:
    """The order placement had before zones and datacenters, written out: by score, each host's best
    first (a token's host), then the rest."""
    scored = sorted(
        ((_score(token, key)[0], url) for url, token in zip(nodes, tokens, strict=True)), reverse=True
    )
    hosts = {url: host_of(token) for url, token in zip(nodes, tokens, strict=True)}
    first: list[str] = []
    rest: list[str] = []
    seen: set[str] = set()
    for _, url in scored:
        (rest if hosts[url] in seen else first).append(url)
        seen.add(hosts[url])
    return first + rest


@pytest.mark.parametrize(
    ("nodes", "tokens"),
    [
        (NODES, NODES),
        (MACHINES, MACHINES),
        (SIX_ON_ONE_HOST, SIX_ON_ONE_HOST),
        ([*MACHINES[:5], "http://127.0.0.9:9000"], MACHINES),  # a replacement elsewhere: its token's host
        ([*MACHINES, "http://127.0.0.2:8082", "http://127.0.0.4:8080"],) * 2,
    ],
    ids=["one-host-three", "three-hosts-two-each", "one-host-six", "replaced", "uneven"],
)
def test_without_zones_or_datacenters_a_key_is_placed_exactly_as_before(
    nodes: list[str], tokens: list[str]
) -> None:
    """The defaults (a node's zone its host, one datacenter) keep every cluster's placement: the same
    order for every key, so a kvnode with zones changes nothing where none were given."""
    placement = Placement(nodes, tokens, replication=3)
    for key in [*SAMPLE_KEYS, *random_keys(5_000, seed=41)]:
        assert placement.order(key) == host_aware_order(nodes, tokens, key), key


# Six machines in three zones of two: every key's three owners, one a zone.
RACKS = ["a", "a", "b", "b", "c", "c"]
SIX_MACHINES = [f"http://127.0.0.{host}:8080" for host in range(1, 7)]


def zones_of(placement: Placement, urls: list[str]) -> list[str]:
    return [placement.zone_of(url) for url in urls]


def test_with_zones_a_a_b_b_c_c_and_n_3_every_key_is_on_three_zones() -> None:
    placement = Placement(SIX_MACHINES, replication=3, zones=RACKS)
    for key in [*SAMPLE_KEYS, *random_keys(5_000, seed=42)]:
        assert sorted(zones_of(placement, placement.owners(key))) == ["a", "b", "c"], key


def test_zones_come_first_then_hosts_then_the_rest() -> None:
    """Two zones, two hosts in each, two nodes a host: the first two replicas in distinct zones, the next
    two on the hosts not yet used, the last four after them."""
    urls = [f"http://127.0.0.{host}:{port}" for host in (1, 2, 3, 4) for port in (80, 81)]
    zones = ["a"] * 4 + ["b"] * 4
    placement = Placement(urls, zones=zones)
    for key in [*SAMPLE_KEYS, *random_keys(2_000, seed=43)]:
        order = placement.order(key)
        assert sorted(zones_of(placement, order[:2])) == ["a", "b"], key
        assert len(hosts_of(order[:4])) == 4, key
        for n in range(1, len(urls) + 1):
            assert placement.replicas_for(key, n) == order[:n]


def test_zone_aware_order_keeps_every_node_balanced() -> None:
    placement = Placement(SIX_MACHINES, replication=3, zones=RACKS)
    keys = random_keys(12_000, seed=44)
    counts = Counter(url for key in keys for url in placement.owners(key))
    expected = len(keys) * 3 / len(SIX_MACHINES)
    assert all(0.9 * expected < counts[url] < 1.1 * expected for url in SIX_MACHINES), counts


@pytest.mark.parametrize(
    ("joining", "zone"), [("http://127.0.0.7:8080", "c"), ("http://127.0.0.7:8080", "d")]
)
def test_a_join_into_a_zone_moves_keys_only_to_the_newcomer(joining: str, zone: str) -> None:
    before = Placement(SIX_MACHINES, replication=3, zones=RACKS)
    after = Placement([*SIX_MACHINES, joining], replication=3, zones=[*RACKS, zone])
    moved = 0
    for key in random_keys(3_000, seed=45):
        old, new = set(before.owners(key)), set(after.owners(key))
        assert new - old <= {joining} and len(old - new) == len(new - old), key
        assert sorted(zones_of(after, sorted(new))) == sorted(set(zones_of(after, sorted(new)))), key
        moved += joining in new
    assert moved > 0


# Two datacenters of three machines, each machine a zone of its own.
EAST = [f"http://10.1.0.{host}:8080" for host in (1, 2, 3)]
WEST = [f"http://10.2.0.{host}:8080" for host in (1, 2, 3)]
TWO_DCS = ["east"] * 3 + ["west"] * 3


def in_datacenter(placement: Placement, urls: list[str], datacenter: str) -> list[str]:
    return [url for url in urls if placement.datacenter_of(url) == datacenter]


def test_each_datacenter_holds_its_own_n_and_the_home_datacenters_owners_come_first() -> None:
    factors = {"east": 2, "west": 3}
    east = Placement([*EAST, *WEST], replication=factors, datacenters=TWO_DCS, home="east")
    west = Placement([*EAST, *WEST], replication=factors, datacenters=TWO_DCS, home="west")
    assert (east.replication, east.owners_by_datacenter) == (5, (("east", 2), ("west", 3)))
    assert west.owners_by_datacenter == (("west", 3), ("east", 2))
    for key in [*SAMPLE_KEYS, *random_keys(2_000, seed=46)]:
        owners = east.owners(key)
        assert [east.datacenter_of(url) for url in owners] == ["east"] * 2 + ["west"] * 3, key
        assert [west.datacenter_of(url) for url in west.owners(key)] == ["west"] * 3 + ["east"] * 2, key
        assert sorted(west.owners(key)) == sorted(owners), key  # the same owners, whoever places them
        assert east.order(key)[5:] == in_datacenter(east, east.order(key), "east")[2:]  # then the others
        # A datacenter's owners are its nodes' own order: as if it were a cluster of its own.
        alone = Placement(EAST, replication=2)
        assert in_datacenter(east, owners, "east") == alone.owners(key), key


def test_a_join_a_leave_or_a_replace_in_one_datacenter_moves_no_key_in_another() -> None:
    factors = {"east": 2, "west": 2}
    before = Placement([*EAST, *WEST], replication=factors, datacenters=TWO_DCS)
    joined = Placement(
        [*EAST, *WEST, "http://10.1.0.4:8080"], replication=factors, datacenters=[*TWO_DCS, "east"]
    )
    left = Placement([*EAST[1:], *WEST], replication=factors, datacenters=TWO_DCS[1:])
    replaced = Placement(
        [*EAST[:2], "http://10.1.0.9:8080", *WEST], [*EAST, *WEST], factors, datacenters=TWO_DCS
    )
    for key in random_keys(3_000, seed=47):
        west = in_datacenter(before, before.owners(key), "west")
        for after in (joined, left, replaced):
            assert in_datacenter(after, after.owners(key), "west") == west, key
        assert set(joined.owners(key)) - set(before.owners(key)) <= {"http://10.1.0.4:8080"}, key


def test_a_datacenter_with_no_n_holds_no_copies_and_some_datacenter_must() -> None:
    placement = Placement([*EAST, *WEST], replication={"east": 3}, datacenters=TWO_DCS, home="west")
    assert placement.owners_by_datacenter == (("west", 0), ("east", 3))
    assert all(placement.datacenter_of(url) == "east" for url in placement.owners(b"user:42"))
    with pytest.raises(ValueError, match="needs an owner"):
        Placement([*EAST, *WEST], replication={"north": 3}, datacenters=TWO_DCS)
    with pytest.raises(ValueError, match="a zone and a datacenter"):
        Placement(EAST, zones=["a"])


def test_the_layout_names_what_placement_depends_on_and_only_the_defaults_keep_the_old_one() -> None:
    plain = Placement(MACHINES, replication=3)
    assert plain.layout == (*MACHINES, *MACHINES, "3")  # a node's saved summaries keep their stamp
    assert Placement(MACHINES, replication=3, zones=[host_of(url) for url in MACHINES]).layout == plain.layout
    other = [
        Placement(MACHINES, replication=3, zones=["a", "a", "b", "b", "c", "c"]),
        Placement(MACHINES, replication=3, datacenters=["dc1"] * 3 + ["dc2"] * 3),
        Placement(MACHINES, replication=3, datacenters=["dc1"] * 3 + ["dc2"] * 3, home="dc2"),
        Placement(MACHINES, replication={"dc1": 3}, datacenters=["dc1"] * 3 + ["dc2"] * 3),
    ]
    assert len({plain.layout, *(placement.layout for placement in other)}) == 5
