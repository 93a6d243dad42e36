"""Hosts for tests, made of network namespaces (loadtest.netns, on kvnode.ops.netns): each host a
namespace with its own address from 198.51.100.0/24 (TEST-NET-2, documentation only: never routed
anywhere, it exists only inside the namespaces made here), joined by a bridge in a namespace of its own;
the test's client sits in one more namespace on the same bridge. With hosts ``far`` away, those are a
second datacenter, 203.0.113.0/24, behind a router that delays what crosses (a WAN). It needs root and
iproute2's ``ip``; a test is skipped with the reason where namespaces cannot be made.

Every namespace is named ``kvmh-<pid of this test run>-...``: a run removes its own at the end, and a
later run removes those of an earlier run whose process is gone (an interrupted or killed one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from kvnode.ops.netns import IpCommandFailed, enter_namespace, inside, remove_leftovers, run_ip, run_prefix
from kvnode.ops.processes import die_with_parent
from loadtest.netns import DATACENTER_SUBNETS, NamespaceNetwork, datacenter_address, unavailable
from tests.harness import Response, request

KIND = "kvmh"  # the namespaces' names: kvmh-PID-ROLE
SUBNET = DATACENTER_SUBNETS[0]
NODE_HOSTS = (1, 2, 3)  # 198.51.100.1 .. .3
CLIENT_HOST = 100
PORT = 8080  # each namespace has ports of its own, so a fixed port collides with nothing
DEADLINE = 30.0  # generous: the machine is shared; every wait below polls until its deadline

T = TypeVar("T")


def _host_links() -> set[str]:
    return {line.split(":")[1].strip() for line in run_ip("-o", "link", "show").splitlines()}


class NamespaceClient:
    """The test's client, inside a namespace: one worker thread enters it and makes every request there.
    If it cannot enter, the pool is broken and no request is made at all (never from the host's)."""

    def __init__(self, namespace: str) -> None:
        self._worker = ThreadPoolExecutor(
            1, thread_name_prefix=namespace, initializer=enter_namespace, initargs=(namespace,)
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
        # `ip netns exec` execs the command in the same process: the PID held here is the node's.
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                inside(self.namespace, self.command),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                preexec_fn=die_with_parent,
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
            network.name(role),
            f"{SUBNET}.{host_part}",
            [sys.executable, "-m", "kvnode", "node", "--host", f"{SUBNET}.{host_part}",
             "--port", str(PORT), "--data-dir", str(data / role), "--cluster", members],
            environment_without_kvnode(),
            data / f"{role}.log",
        )
        for role, host_part in roles.items()
    ]  # fmt: skip


def skip_unless_namespaces_possible(delay: bool = False) -> None:
    reason = unavailable(delay)
    if reason:
        pytest.skip(reason)


_CANNOT = ("Operation not permitted", "Permission denied", "not supported", "Unknown device type")


def environment_without_kvnode() -> dict[str, str]:
    """This process's environment less every KVNODE_* variable: a node under test takes its settings
    only from what the test gives it."""
    return {name: value for name, value in os.environ.items() if not name.startswith("KVNODE_")}


@contextlib.contextmanager
def hosts(
    members: dict[str, int], far: dict[str, int] | None = None, round_trip_ms: float = 0.0
) -> Iterator[tuple[NamespaceNetwork, NamespaceClient]]:
    """A namespace per member role (198.51.100.HOST), and a client namespace on the same bridge; with
    ``far``, a namespace per role of those in a second datacenter (203.0.113.HOST), ``round_trip_ms``
    between the two (loadtest.netns's delay line). Every namespace this run made removed at the end,
    and those an earlier, gone run left behind before. Skips where namespaces (or the delay line) cannot
    be made."""
    skip_unless_namespaces_possible(delay=far is not None)
    remove_leftovers(KIND)
    network = NamespaceNetwork(run_prefix(KIND))
    client: NamespaceClient | None = None
    host_links = _host_links()
    near = {**members, "client": CLIENT_HOST}
    addresses = {role: datacenter_address(0, part) for role, part in near.items()}
    addresses |= {role: datacenter_address(1, part) for role, part in (far or {}).items()}
    try:
        try:
            network.build(addresses)
            if far is not None:
                network.delay(round_trip_ms)
        except IpCommandFailed as error:
            if any(reason in str(error) for reason in _CANNOT):
                pytest.skip(f"cannot create network namespaces here: {error}")
            raise
        assert _host_links() == host_links, (
            "building the namespaces added an interface to the host's namespace"
        )
        client = NamespaceClient(network.name("client"))
        yield network, client
    finally:
        if client is not None:
            client.close()
        network.remove()
