"""Nodes on separate hosts, and nothing in kvnode that assumes 127.0.0.1: three nodes a network
namespace each, with their own addresses, and the test's client in a fourth (tests/namespaces.py makes
them). The rest: a cluster on IPv6 loopback.
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from kvnode.config import NodeConfig, node_url
from kvnode.ops.netns import run_ip, same_namespace
from kvnode.ops.ports import free_ports
from tests.harness import Cluster, Node, poll, written
from tests.namespaces import DEADLINE, NODE_HOSTS, SUBNET, MultiHostCluster, hosts, member_per_host


@pytest.fixture(scope="module")
def multihost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiHostCluster]:
    roles = {f"n{host_part}": host_part for host_part in NODE_HOSTS}
    with hosts(roles) as (network, client):
        nodes = member_per_host(network, roles, tmp_path_factory.mktemp("multihost"))
        with MultiHostCluster(client, nodes).running() as running:
            yield running


@pytest.fixture
def cluster(multihost: MultiHostCluster) -> MultiHostCluster:
    """The module's cluster with every node serving (a failed test may have left one stopped)."""
    for node in multihost.nodes:
        if not node.running:
            multihost.start(node)
    return multihost


def test_each_node_runs_in_its_own_namespace_with_its_own_address(cluster: MultiHostCluster) -> None:
    for node in cluster.nodes:
        assert node.process is not None
        # `ip netns exec` has exec'd the node: the PID held is Python running kvnode, not `ip`
        argv = Path(f"/proc/{node.process.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[:4] == [sys.executable.encode(), b"-m", b"kvnode", b"node"], argv
        assert same_namespace(f"/proc/{node.process.pid}/ns/net", node.namespace)
        addresses = run_ip("-n", node.namespace, "-o", "-4", "addr", "show", "dev", "eth0")
        assert f"inet {node.host_address}/24" in addresses
    assert SUBNET not in run_ip("-o", "addr", "show"), (
        "a 198.51.100.0/24 address leaked into the host's namespace"
    )
    assert SUBNET not in run_ip("route", "show"), "a 198.51.100.0/24 route leaked into the host's namespace"


def test_put_get_delete_through_each_node(cluster: MultiHostCluster) -> None:
    for coordinator in cluster.nodes:
        key, value = f"via-{coordinator.host_address}", f"written through {coordinator.url}".encode()
        assert cluster.request(coordinator, "PUT", key, value).status == 201
        for reader in cluster.nodes:
            answer = cluster.request(reader, "GET", key, ack=3)
            assert (answer.status, answer.body) == (200, value), reader.url
        assert cluster.request(coordinator, "DELETE", key).status == 202
        for reader in cluster.nodes:
            assert cluster.request(reader, "GET", key, ack=3).status == 404, reader.url


@pytest.mark.parametrize(
    ("down", "signum"),
    [(0, signal.SIGKILL), (1, signal.SIGTERM), (2, signal.SIGKILL)],
    ids=lambda value: value.name if isinstance(value, signal.Signals) else f"{SUBNET}.{value + 1}",
)
def test_replica_down_through_each_other_node(
    cluster: MultiHostCluster, down: int, signum: signal.Signals
) -> None:
    stopped = cluster.nodes[down]
    stopped.stop(signum)
    missed = f"written-while-{stopped.host_address}-was-down"
    for coordinator in cluster.others(stopped):
        key, value = f"down-{stopped.host_address}-via-{coordinator.host_address}", b"two of three"
        assert cluster.request(coordinator, "PUT", key, value).status == 201
        for reader in cluster.others(stopped):
            answer = cluster.request(reader, "GET", key)
            assert (answer.status, answer.body) == (200, value), reader.url
        assert cluster.request(coordinator, "PUT", key, b"needs three", ack=3).status == 504
        assert cluster.request(coordinator, "GET", key, ack=3).status == 504
        assert cluster.request(coordinator, "DELETE", key).status == 202
        assert cluster.request(coordinator, "GET", key).status == 404
        assert cluster.request(coordinator, "PUT", missed, coordinator.url.encode()).status == 201

    cluster.start(stopped)
    answer = cluster.request(stopped, "GET", missed)
    assert (answer.status, answer.body) == (200, coordinator.url.encode())  # the later write wins
    # Every peer reaches the restarted node again: ack=3 writes through each node succeed (polled,
    # since a peer may still be waiting out its reconnect interval).
    for coordinator in cluster.nodes:
        put = partial(cluster.request, coordinator, "PUT", "all-three", b"back", ack=3)
        poll(put, written, DEADLINE, f"an ack=3 write through {coordinator.url}")
    answer = cluster.request(stopped, "GET", "all-three", ack=3)
    assert (answer.status, answer.body) == (200, b"back")


# --- addresses other than 127.0.0.1 -------------------------------------------------------------------


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_cluster_on_ipv6_loopback(tmp_path: Path) -> None:
    ports = free_ports(3)
    urls = tuple(node_url("::1", port) for port in ports)
    nodes = [
        Node(
            NodeConfig(host="::1", port=port, data_dir=tmp_path / str(port), cluster=urls),
            tmp_path / f"{port}.log",
        )
        for port in ports
    ]
    cluster = Cluster(nodes)
    try:
        cluster.start()
        assert nodes[0].put("k", b"over IPv6", ack=3).status == 201
        for node in nodes:
            answer = node.get("k", ack=3)
            assert (answer.status, answer.body) == (200, b"over IPv6")
    finally:
        for node in nodes:
            if node.process is not None:
                node.stop()
