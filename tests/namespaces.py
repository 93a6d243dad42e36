"""Hosts for tests, made of network namespaces: each host a namespace with its own address from
198.51.100.0/24 (TEST-NET-2, documentation only: never routed anywhere, it exists only inside the
namespaces made here), joined by a bridge in a namespace of its own; the test's client sits in one more
namespace on the same bridge. The veth pairs are created inside the bridge's namespace with their other
end placed straight into a member's namespace, so no interface, address or route ever appears in the
host's namespace, and deleting the namespaces removes everything. It needs root and iproute2's ``ip``;
a test is skipped with the reason where namespaces cannot be made.

Every namespace is named ``kvmh-<pid of this test run>-...``: a run removes its own at the end, and a
later run removes those of an earlier run whose process is gone (an interrupted or killed one).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from kvnode.ops.processes import die_with_parent
from tests.harness import Response, request

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


def ip_binary() -> str:
    """iproute2's ``ip`` (the tests that use it are skipped where it is missing)."""
    found = _ip_binary()
    assert found is not None
    return found


def _ip_binary() -> str | None:
    return shutil.which("ip", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def run_ip(*args: str) -> str:
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
    return [line.split()[0] for line in run_ip("netns", "list").splitlines() if line.strip()]


def _host_links() -> set[str]:
    return {line.split(":")[1].strip() for line in run_ip("-o", "link", "show").splitlines()}


@dataclass
class NamespaceNetwork:
    """Network namespaces joined by a bridge that lives in a namespace of its own."""

    prefix: str
    namespaces: list[str] = field(default_factory=list)

    def add_namespace(self, role: str) -> str:
        name = f"{self.prefix}-{role}"
        self.namespaces.append(name)  # before: a failed add may still have left the name behind
        run_ip("netns", "add", name)
        run_ip("-n", name, "link", "set", "lo", "up")
        return name

    def build(self, members: dict[str, int]) -> None:
        """A bridge namespace, and for each member role a namespace with 198.51.100.HOST/24 on its eth0."""
        bridge = self.add_namespace("br")
        run_ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        run_ip("-n", bridge, "link", "set", "br0", "up")
        for role, host_part in members.items():
            member = self.add_namespace(role)
            # Created in the bridge's namespace, its peer born in the member's: never in the host's.
            # Interface names need only be unique within their namespace.
            port = f"v{role}"
            run_ip("-n", bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", member)
            run_ip("-n", bridge, "link", "set", port, "master", "br0", "up")
            run_ip("-n", member, "addr", "add", f"{SUBNET}.{host_part}/24", "dev", "eth0")
            run_ip("-n", member, "link", "set", "eth0", "up")

    def remove(self) -> None:
        """Delete every namespace made, which deletes the bridge and the veths in them."""
        for name in reversed(self.namespaces):
            with contextlib.suppress(IpCommandFailed):
                run_ip("netns", "delete", name)
        self.namespaces.clear()


def same_namespace(proc_path: str, namespace: str) -> bool:
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
    if not same_namespace("/proc/thread-self/ns/net", namespace):
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
    """A node process in a namespace of its own, started as an operator on that host would start it:
    ``command`` (a kvnode command line) with ``env`` as its whole environment."""

    namespace: str
    host_address: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host_address}:{PORT}"

    def start(self) -> None:
        ip = _ip_binary()
        assert ip is not None
        # `ip netns exec` execs the command in the same process: the PID held here is the node's.
        argv = [ip, "netns", "exec", self.namespace, *self.command]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, preexec_fn=die_with_parent
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

    @contextlib.contextmanager
    def running(self) -> Iterator[MultiHostCluster]:
        """Every node started (all at once, then each waited for), and stopped by PID at the end."""
        try:
            for node in self.nodes:
                node.start()
            for node in self.nodes:
                self.wait_ready(node)
            yield self
        finally:
            for node in self.nodes:
                node.stop()

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


def member_per_host(network: NamespaceNetwork, roles: dict[str, int], data: Path) -> list[NamespacedNode]:
    """A node in each role's namespace (198.51.100.HOST, the port PORT), the cluster every one of them,
    its data dir and log under ``data``: as an operator on each host starts it (not yet started)."""
    members = ",".join(f"http://{SUBNET}.{host_part}:{PORT}" for host_part in roles.values())
    return [
        NamespacedNode(
            f"{network.prefix}-{role}",
            f"{SUBNET}.{host_part}",
            [sys.executable, "-m", "kvnode", "node", "--host", f"{SUBNET}.{host_part}",
             "--port", str(PORT), "--data-dir", str(data / role), "--cluster", members],
            environment_without_kvnode(),
            data / f"{role}.log",
        )
        for role, host_part in roles.items()
    ]  # fmt: skip


def skip_unless_namespaces_possible() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("network namespaces are a Linux feature")
    if _ip_binary() is None:
        pytest.skip("no `ip` binary (iproute2): cannot create network namespaces")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root; this test run is not root")


_CANNOT = ("Operation not permitted", "Permission denied", "not supported", "Unknown device type")


def environment_without_kvnode() -> dict[str, str]:
    """This process's environment less every KVNODE_* variable: a node under test takes its settings
    only from what the test gives it."""
    return {name: value for name, value in os.environ.items() if not name.startswith("KVNODE_")}


@contextlib.contextmanager
def hosts(members: dict[str, int]) -> Iterator[tuple[NamespaceNetwork, NamespaceClient]]:
    """A namespace per member role (198.51.100.HOST), and a client namespace on the same bridge; every
    namespace this run made removed at the end, and those an earlier, gone run left behind before.
    Skips where namespaces cannot be made."""
    skip_unless_namespaces_possible()
    # An earlier process with this very pid cannot be running: its namespaces are leftovers too.
    for name in leftover_namespaces(
        _namespace_names(), lambda pid: pid != os.getpid() and _process_exists(pid)
    ):
        with contextlib.suppress(IpCommandFailed):
            run_ip("netns", "delete", name)
    network = NamespaceNetwork(f"{PREFIX}{os.getpid()}")
    client: NamespaceClient | None = None
    host_links = _host_links()
    try:
        try:
            network.build({**members, "client": CLIENT_HOST})
        except IpCommandFailed as error:
            if any(reason in str(error) for reason in _CANNOT):
                pytest.skip(f"cannot create network namespaces here: {error}")
            raise
        assert _host_links() == host_links, (
            "building the namespaces added an interface to the host's namespace"
        )
        client = NamespaceClient(f"{network.prefix}-client")
        yield network, client
    finally:
        if client is not None:
            client.close()
        network.remove()
