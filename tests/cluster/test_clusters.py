"""Real clusters of 2, 3 and 5 node processes: placement on the wire, quorum invariants, 504s and 400s."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial

import pytest

from kvnode.config import FanoutMode
from kvnode.topology.placement import Placement
from tests.harness import (
    FANOUTS,
    Cluster,
    ClusterFactory,
    Node,
    Response,
    fresh_key,
    key_where,
    launch_cluster,
    miss_while_restored,
    poll,
    request,
)

SharedClusters = Callable[[int, FanoutMode], Cluster]


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedClusters]:
    """Clusters that no test breaks, shared by the module's read/write tests; every test uses fresh keys."""
    clusters: dict[tuple[int, FanoutMode], Cluster] = {}

    def get(size: int, fanout: FanoutMode) -> Cluster:
        if (size, fanout) not in clusters:
            path = tmp_path_factory.mktemp(f"shared-{size}-{fanout}")
            clusters[size, fanout] = launch_cluster(path, size, fanout=fanout)
        return clusters[size, fanout]

    yield get
    for cluster in clusters.values():
        cluster.stop()


def values_held(nodes: Iterable[Node], key: str) -> dict[str, bytes]:
    """{node URL: value} of the nodes whose own range scan holds key as a live record."""
    found: dict[str, bytes] = {}
    for node in nodes:
        for held_key, value in node.scan(key, key + "\x00"):  # [key, key + NUL) holds key only
            assert held_key == key.encode(), held_key
            found[node.url] = value
    return found


def holders(cluster: Cluster, key: str) -> set[str]:
    return set(values_held(cluster, key))


def assert_one_line_reason(response: Response, status: int) -> None:
    assert response.status == status, (response.status, response.body)
    assert response.body.endswith(b"\n") and response.body.count(b"\n") == 1, response.body
    assert response.body.strip(), "the reason is empty"


def all_within(expected: set[str], found: set[str]) -> bool:
    """Every copy is on the expected replicas (a copy elsewhere fails at once); all of them are there."""
    assert found <= expected, f"copies outside the expected replicas: {found - expected}"
    return found == expected


def not_504(response: Response) -> bool:
    return response.status != 504


# Any node serves any key, with the default quorum.


@pytest.mark.parametrize("fanout", FANOUTS)
@pytest.mark.parametrize("size", [2, 3, 5])
def test_any_node_serves_any_key(shared_cluster: SharedClusters, size: int, fanout: FanoutMode) -> None:
    cluster = shared_cluster(size, fanout)
    values = [b"plain", b"", b"line\nbreak", bytes(range(256)), b"x" * 100_000]
    labels = ["any", "ключ", "emoji \N{SLIGHTLY SMILING FACE}", "a&b=c?d/e%f", "tab\tnl\nnul\x00"]
    keys = [fresh_key(labels[index % len(labels)]) for index in range(max(size, len(labels)))]
    for index, key in enumerate(keys):
        value = values[index % len(values)]
        assert cluster[index % size].put(key, value).status == 201
        for node in cluster:
            answer = node.get(key)
            assert (answer.status, answer.body) == (200, value), (node.url, key)
    for index, key in enumerate(keys):
        assert cluster[(index + 1) % size].delete(key).status == 202
        for node in cluster:
            assert node.get(key).status == 404, (node.url, key)


@pytest.mark.parametrize("fanout", FANOUTS)
def test_last_write_wins_across_coordinators(shared_cluster: SharedClusters, fanout: FanoutMode) -> None:
    cluster = shared_cluster(3, fanout)
    key = fresh_key("lww")
    for round_ in range(6):
        writer = cluster[round_ % 3]
        if round_ % 3 == 2:
            assert writer.delete(key).status == 202
            expected: tuple[int, bytes] = (404, b"")
        else:
            value = f"round-{round_}".encode()
            assert writer.put(key, value).status == 201
            expected = (200, value)
        for node in cluster:
            answer = node.get(key, ack=3, from_=3)
            assert answer.status == expected[0], (round_, node.url, answer)
            if expected[0] == 200:
                assert answer.body == expected[1]


# A PUT with from=k writes exactly k copies, on the key's first k nodes in placement order.


@pytest.mark.parametrize("fanout", FANOUTS)
@pytest.mark.parametrize("size", [2, 3, 5])
def test_put_with_from_k_and_ack_k_stores_exactly_k_copies(
    shared_cluster: SharedClusters, size: int, fanout: FanoutMode
) -> None:
    cluster = shared_cluster(size, fanout)
    placement = Placement(cluster.urls)
    for k in range(1, size + 1):
        for coordinator in cluster:
            key = fresh_key(f"copies-{k}")
            assert coordinator.put(key, b"v", ack=k, from_=k).status == 201
            expected = set(placement.replicas_for(key.encode(), k))
            assert holders(cluster, key) == expected, (k, coordinator.url)


@pytest.mark.parametrize("fanout", FANOUTS)
@pytest.mark.parametrize("size", [3, 5])
def test_put_with_ack_below_from_reaches_all_from_replicas(
    shared_cluster: SharedClusters, size: int, fanout: FanoutMode
) -> None:
    """Every mode sends a write to all `from` replicas: async answers at ack and lets the other calls
    finish, sync asks each in turn, all of them. Nothing lands outside the first `from` replicas."""
    cluster = shared_cluster(size, fanout)
    placement = Placement(cluster.urls)
    for k in range(2, size + 1):
        key = fresh_key(f"copies-{fanout}-{k}")
        assert cluster[0].put(key, b"v", ack=1, from_=k).status == 201
        expected = set(placement.replicas_for(key.encode(), k))
        poll(partial(holders, cluster, key), partial(all_within, expected), what=f"{key} on its {k} replicas")


# Quorum invariants with nodes down.


@pytest.mark.parametrize("fanout", FANOUTS)
def test_get_1_of_2_sees_put_2_of_2_with_the_other_node_down(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    cluster = start_cluster(2, fanout=fanout)
    first, second = cluster[0], cluster[1]
    # One key that first is primary for, one that second is: either way the survivor must answer.
    keys = [
        key_where(cluster.urls, "two-a", lambda order: order[0] == first.url),
        key_where(cluster.urls, "two-b", lambda order: order[0] == second.url),
    ]
    for key in keys:
        assert first.put(key, b"old", ack=2, from_=2).status == 201
        assert second.put(key, b"new:" + key.encode(), ack=2, from_=2).status == 201
    second.kill()
    for key in keys:
        answer = first.get(key, ack=1, from_=2)
        assert (answer.status, answer.body) == (200, b"new:" + key.encode()), key
    second.restart()
    first.kill()
    for key in keys:
        answer = second.get(key, ack=1, from_=2)
        assert (answer.status, answer.body) == (200, b"new:" + key.encode()), key


@pytest.mark.parametrize("fanout", FANOUTS)
def test_get_2_of_3_sees_put_and_delete_2_of_3_with_a_node_down(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    """Each step runs with a different node down, so write and read sets overlap in one node only."""
    cluster = start_cluster(3, fanout=fanout)
    key = key_where(cluster.urls, "two-of-three", lambda order: True)
    order = [cluster.by_url(url) for url in Placement(cluster.urls).order(key.encode())]
    a, b, c = order  # a is the key's primary: a sync coordinator asks it first

    # Every write is coordinated by a node that is stopped before the replica it hinted comes back, so
    # no hint can reach that replica while the step runs: each stale replica is stale by construction.
    a.kill()
    assert c.put(key, b"value", ack=2, from_=3).status == 201  # on b and c; c keeps a's hint
    for node in (b, c):
        answer = node.get(key, ack=2, from_=3)
        assert (answer.status, answer.body) == (200, b"value"), node.url

    c.kill()  # with a's hint on its disk
    a.restart()  # a never saw the PUT
    assert values_held(cluster.running(), key) == {b.url: b"value"}, "the scenario needs a stale replica"
    for node in (a, b):  # reads {a, b}: only b has the value
        answer = poll(partial(node.get, key, ack=2, from_=3), not_504)
        assert (answer.status, answer.body) == (200, b"value"), node.url

    answer = poll(partial(b.delete, key, ack=2, from_=3), not_504)  # tombstone on a and b; b keeps c's hint
    assert answer.status == 202, answer
    b.kill()  # with c's hint on its disk
    c.restart()  # c still holds the value
    assert values_held(cluster.running(), key) == {c.url: b"value"}, "the scenario needs a stale replica"
    for node in (a, c):  # reads {a, c}: a's tombstone is newer than c's value
        answer = poll(partial(node.get, key, ack=2, from_=3), not_504)
        assert answer.status == 404, (node.url, answer)


@pytest.mark.parametrize("fanout", FANOUTS)
def test_stale_replica_does_not_win_over_a_newer_tombstone(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    cluster = start_cluster(3, fanout=fanout)
    key = key_where(cluster.urls, "stale-tombstone", lambda order: True)
    stale = cluster.by_url(Placement(cluster.urls).order(key.encode())[0])  # asked first by sync
    others = [node for node in cluster if node is not stale]
    assert others[0].put(key, b"doomed", ack=3, from_=3).status == 201
    miss_while_restored(stale, lambda: others[1].delete(key, ack=3, from_=3).status == 202)
    assert values_held(cluster, key) == {stale.url: b"doomed"}, "the scenario needs a stale replica"
    for node in cluster:
        answer = poll(partial(node.get, key, ack=3, from_=3), not_504)
        assert answer.status == 404, ("3/3", node.url, answer)
        answer = poll(partial(node.get, key, ack=2, from_=3), not_504)
        assert answer.status == 404, ("2/3", node.url, answer)


@pytest.mark.parametrize("fanout", FANOUTS)
def test_stale_replica_does_not_win_over_a_newer_value(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    cluster = start_cluster(3, fanout=fanout)
    key = key_where(cluster.urls, "stale-value", lambda order: True)
    stale = cluster.by_url(Placement(cluster.urls).order(key.encode())[0])
    others = [node for node in cluster if node is not stale]
    assert others[0].put(key, b"old", ack=3, from_=3).status == 201
    miss_while_restored(stale, lambda: others[1].put(key, b"new", ack=3, from_=3).status == 201)
    assert values_held(cluster, key) == {node.url: b"new" if node in others else b"old" for node in cluster}
    for node in cluster:
        for ack in (3, 2):
            answer = poll(partial(node.get, key, ack=ack, from_=3), not_504)
            assert (answer.status, answer.body) == (200, b"new"), (ack, node.url)


@pytest.mark.parametrize("fanout", FANOUTS)
def test_504_with_a_one_line_reason_when_too_few_replicas_are_up(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    cluster = start_cluster(3, fanout=fanout)
    survivor = cluster[0]
    key = fresh_key("too-few")
    assert survivor.put(key, b"before", ack=3, from_=3).status == 201
    cluster[1].kill()
    cluster[2].kill()
    assert_one_line_reason(survivor.put(key, b"after"), 504)
    assert_one_line_reason(survivor.get(key), 504)
    assert_one_line_reason(survivor.delete(key), 504)
    assert_one_line_reason(survivor.get(key, ack=3, from_=3), 504)
    # With ack=1 the survivor alone is enough.
    assert survivor.put(key, b"alone", ack=1, from_=3).status == 201
    answer = survivor.get(key, ack=1, from_=3)
    assert (answer.status, answer.body) == (200, b"alone")


# 400: ack/from a request may not ask for. Nothing of it is written.

BAD_QUORUMS: list[dict[str, str]] = [
    {"ack": "0"},
    {"from": "0"},
    {"ack": "0", "from": "0"},
    {"ack": "-1"},
    {"ack": "two"},
    {"from": ""},
    {"ack": ""},
    {"ack": "1.0"},
    {"ack": "3", "from": "2"},
    {"ack": "2", "from": "1"},
    {"from": "SIZE+1"},
    {"ack": "1", "from": "SIZE+1"},
    {"ack": "SIZE+1"},
]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("size", [2, 3, 5])
def test_bad_ack_or_from_is_400_and_writes_nothing(
    shared_cluster: SharedClusters, size: int, method: str
) -> None:
    cluster = shared_cluster(size, "async")
    for bad in BAD_QUORUMS:
        params = {name: value.replace("SIZE+1", str(size + 1)) for name, value in bad.items()}
        # The key holds a value on every node first: a rejected PUT would replace it and a rejected
        # DELETE would hide it behind a tombstone, so either shows in every node's own listing.
        key = fresh_key("bad-quorum")
        assert cluster[0].put(key, b"kept", ack=size, from_=size).status == 201
        body = b"must not be stored" if method == "PUT" else None
        answer = request(cluster[0].url, method, "/v0/entity", {"id": key, **params}, body=body)
        assert_one_line_reason(answer, 400)
        assert values_held(cluster, key) == dict.fromkeys(cluster.urls, b"kept"), params


@pytest.mark.parametrize("name", ["ack", "from"])
def test_an_ack_or_from_too_long_for_int_is_400_not_500(shared_cluster: SharedClusters, name: str) -> None:
    cluster = shared_cluster(3, "async")
    key = fresh_key("huge-quorum")
    answer = request(cluster[0].url, "PUT", "/v0/entity", {"id": key, name: "9" * 5000}, body=b"x")
    assert_one_line_reason(answer, 400)
    assert holders(cluster, key) == set()
