"""Nodes on separate hosts, and nothing in kvnode that assumes 127.0.0.1.

The multi-host test gives three nodes a network namespace each, with their own addresses from
198.51.100.0/24 (TEST-NET-2, documentation only: never routed anywhere, it exists only inside the
namespaces made here), joined by a bridge in a namespace of its own; the test's client sits in a fifth
namespace on the same bridge. The veth pairs are created inside the bridge's namespace with their other
end placed straight into a member's namespace, so no interface, address or route ever appears in the
host's namespace, and deleting the namespaces removes everything. It needs root and iproute2's ``ip``
and is skipped with the reason where namespaces cannot be made.

Every namespace is named ``kvmh-<pid of this test run>-<role>``: the run removes its own at the end, and a
later run removes those of an earlier run whose process is gone (an interrupted or killed one).

The rest: a cluster on IPv6 loopback.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from kvnode.config import NodeConfig, node_url
from kvnode.ops.ports import free_ports
from kvnode.ops.processes import die_with_parent
from tests.harness import Cluster, Node, Response, request

PREFIX = "kvmh-"
SUBNET = "198.51.100"
NODE_HOSTS = (1, 2, 3)  # 198.51.100.1 .. .3
CLIENT_HOST = 100
PORT = 8080  # each namespace has ports of its own, so a fixed port collides with nothing
DEADLINE = 30.0  # generous: the machine is shared; every wait below polls until its deadline
_CLONE_NEWNET = 0x40000000
_NETNS_DIR = Path("/run/netns")  # where `ip netns add` names namespaces

T = TypeVar("T")


# --- namespaces ---------------------------------------------------------------------------------------


class IpCommandFailed(Exception):
    pass


def _ip_binary() -> str | None:
    return shutil.which("ip", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def _ip(*args: str) -> str:
    ip = _ip_binary()
    assert ip is not None
    result = subprocess.run([ip, *args], capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise IpCommandFailed(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def leftover_namespaces(names: Iterable[str], is_running: Callable[[int], bool]) -> list[str]:
    """The namespaces an earlier run of this test left behind: this test's prefix, and that run's
    process gone. Anything else, including a live run's namespaces, is not ours to remove."""
    pattern = re.compile(rf"{re.escape(PREFIX)}(\d+)-[a-z0-9]+")
    return [
        name
        for name in names
        if (match := pattern.fullmatch(name)) is not None and not is_running(int(match[1]))
    ]


def _process_exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _namespace_names() -> list[str]:
    # `ip netns list` prints "NAME" or "NAME (id: N)", one a line
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _host_links() -> set[str]:
    return {line.split(":")[1].strip() for line in _ip("-o", "link", "show").splitlines()}


@dataclass
class NamespaceNetwork:
    """Network namespaces joined by a bridge that lives in a namespace of its own."""

    prefix: str
    namespaces: list[str] = field(default_factory=list)

    def add_namespace(self, role: str) -> str:
        name = f"{self.prefix}-{role}"
        self.namespaces.append(name)  # before: a failed add may still have left the name behind
        _ip("netns", "add", name)
        _ip("-n", name, "link", "set", "lo", "up")
        return name

    def build(self, members: dict[str, int]) -> None:
        """A bridge namespace, and for each member role a namespace with 198.51.100.HOST/24 on its eth0."""
        bridge = self.add_namespace("br")
        _ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge, "link", "set", "br0", "up")
        for role, host_part in members.items():
            member = self.add_namespace(role)
            # Created in the bridge's namespace, its peer born in the member's: never in the host's.
            # Interface names need only be unique within their namespace.
            port = f"v{role}"
            _ip("-n", bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", member)
            _ip("-n", bridge, "link", "set", port, "master", "br0", "up")
            _ip("-n", member, "addr", "add", f"{SUBNET}.{host_part}/24", "dev", "eth0")
            _ip("-n", member, "link", "set", "eth0", "up")

    def remove(self) -> None:
        """Delete every namespace made, which deletes the bridge and the veths in them."""
        for name in reversed(self.namespaces):
            with contextlib.suppress(IpCommandFailed):
                _ip("netns", "delete", name)
        self.namespaces.clear()


def _same_namespace(proc_path: str, namespace: str) -> bool:
    return os.stat(proc_path).st_ino == os.stat(_NETNS_DIR / namespace).st_ino


def _enter_namespace(namespace: str) -> None:
    """Move the calling thread (only it: the network namespace is per thread) into ``namespace``."""
    fd = os.open(_NETNS_DIR / namespace, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)
    if not _same_namespace("/proc/thread-self/ns/net", namespace):
        raise OSError(f"the client thread is not in {namespace}")


class NamespaceClient:
    """The test's client, inside a namespace: one worker thread enters it and makes every request there.
    If it cannot enter, the pool is broken and no request is made at all (never from the host's)."""

    def __init__(self, namespace: str) -> None:
        self._worker = ThreadPoolExecutor(
            1, thread_name_prefix=namespace, initializer=_enter_namespace, initargs=(namespace,)
        )
        self.run(lambda: None)  # raises here if the thread could not enter the namespace

    def run(self, function: Callable[..., T], *args: object) -> T:
        return self._worker.submit(function, *args).result(timeout=DEADLINE + 5)

    def wait_until_serving(self, node: NamespacedNode) -> bool:
        serving: bool = self.run(_serving_within, node, time.monotonic() + DEADLINE)
        return serving

    def close(self) -> None:
        self._worker.shutdown(wait=True)


def _serving_within(node: NamespacedNode, deadline: float) -> bool:
    """Poll the node's /v0/status (from the calling thread's namespace) until it answers 200; False once
    the node exits or the deadline passes."""
    while time.monotonic() < deadline and node.running:
        try:
            if request(node.url, "GET", "/v0/status", timeout=1.0).status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


@dataclass
class NamespacedNode:
    """A node process in a namespace of its own, started as an operator on that host would start it."""

    namespace: str
    host_address: str
    cluster: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host_address}:{PORT}"

    def start(self) -> None:
        ip = _ip_binary()
        assert ip is not None
        # `ip netns exec` execs the command in the same process: the PID held here is the node's.
        argv = [ip, "netns", "exec", self.namespace, sys.executable, "-m", "kvnode", "node",
                "--host", self.host_address, "--port", str(PORT), "--data-dir", str(self.data_dir),
                "--cluster", self.cluster]  # fmt: skip
        # The nodes under test take their settings from these flags only, not from the caller's KVNODE_*.
        env = {name: value for name, value in os.environ.items() if not name.startswith("KVNODE_")}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, signum: signal.Signals = signal.SIGTERM) -> None:
        """Send ``signum`` to the node's PID and wait for it to end (SIGKILL after the deadline)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


@dataclass
class MultiHostCluster:
    client: NamespaceClient
    nodes: list[NamespacedNode]

    def start(self, node: NamespacedNode) -> None:
        node.start()
        self.wait_ready(node)

    def wait_ready(self, node: NamespacedNode) -> None:
        if not self.client.wait_until_serving(node):
            raise AssertionError(f"node {node.url} in {node.namespace} did not serve:\n{node.log_tail()}")

    def others(self, node: NamespacedNode) -> list[NamespacedNode]:
        return [other for other in self.nodes if other is not node]

    def request(
        self, node: NamespacedNode, method: str, key: str, body: bytes | None = None, **quorum: int
    ) -> Response:
        return self.client.run(request, node.url, method, "/v0/entity", {"id": key, **quorum}, body, 5.0)


def _skip_unless_namespaces_possible() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("network namespaces are a Linux feature")
    if _ip_binary() is None:
        pytest.skip("no `ip` binary (iproute2): cannot create network namespaces")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root; this test run is not root")


_CANNOT = ("Operation not permitted", "Permission denied", "not supported", "Unknown device type")


@pytest.fixture(scope="module")
def multihost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiHostCluster]:
    _skip_unless_namespaces_possible()
    # An earlier process with this very pid cannot be running: its namespaces are leftovers too.
    for name in leftover_namespaces(
        _namespace_names(), lambda pid: pid != os.getpid() and _process_exists(pid)
    ):
        with contextlib.suppress(IpCommandFailed):
            _ip("netns", "delete", name)
    network = NamespaceNetwork(f"{PREFIX}{os.getpid()}")
    nodes: list[NamespacedNode] = []
    client: NamespaceClient | None = None
    host_links = _host_links()
    try:
        roles = {f"n{host_part}": host_part for host_part in NODE_HOSTS}
        try:
            network.build({**roles, "client": CLIENT_HOST})
        except IpCommandFailed as error:
            if any(reason in str(error) for reason in _CANNOT):
                pytest.skip(f"cannot create network namespaces here: {error}")
            raise
        assert _host_links() == host_links, (
            "building the namespaces added an interface to the host's namespace"
        )
        tmp = tmp_path_factory.mktemp("multihost")
        cluster = ",".join(f"http://{SUBNET}.{host_part}:{PORT}" for host_part in NODE_HOSTS)
        for role, host_part in roles.items():
            nodes.append(
                NamespacedNode(
                    f"{network.prefix}-{role}",
                    f"{SUBNET}.{host_part}",
                    cluster,
                    tmp / role,
                    tmp / f"{role}.log",
                )
            )
        client = NamespaceClient(f"{network.prefix}-client")
        multihost = MultiHostCluster(client, nodes)
        for node in nodes:
            node.start()
        for node in nodes:
            multihost.wait_ready(node)
        yield multihost
    finally:
        for node in nodes:
            node.stop()
        if client is not None:
            client.close()
        network.remove()


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
        assert _same_namespace(f"/proc/{node.process.pid}/ns/net", node.namespace)
        addresses = _ip("-n", node.namespace, "-o", "-4", "addr", "show", "dev", "eth0")
        assert f"inet {node.host_address}/24" in addresses
    assert SUBNET not in _ip("-o", "addr", "show"), (
        "a 198.51.100.0/24 address leaked into the host's namespace"
    )
    assert SUBNET not in _ip("route", "show"), "a 198.51.100.0/24 route leaked into the host's namespace"


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
        deadline = time.monotonic() + DEADLINE
        while (status := cluster.request(coordinator, "PUT", "all-three", b"back", ack=3).status) != 201:
            assert status == 504 and time.monotonic() < deadline, (coordinator.url, status)
            time.sleep(0.05)
    answer = cluster.request(stopped, "GET", "all-three", ack=3)
    assert (answer.status, answer.body) == (200, b"back")


def test_leftovers_are_only_namespaces_of_this_test_whose_run_is_gone() -> None:
    names = ["kvmh-100-br", "kvmh-100-n1", "kvmh-200-client", "kvmh-x-br", "other-100-br", "kvmh-100"]
    assert leftover_namespaces(names, lambda pid: pid == 200) == ["kvmh-100-br", "kvmh-100-n1"]
    assert leftover_namespaces(names, lambda pid: True) == []


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
