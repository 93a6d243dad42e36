"""The cluster ``check --local`` runs (kvnode.ops.local_cluster starts it), and every fault it injects there:
kill -9 and start again, SIGSTOP and SIGCONT, a partition (a node cut from every other: kvnode.check.netns),
a clock offset (the node started again with ``KVNODE_CLOCK_OFFSET_MS``), a membership change (a new node
joins through the first member; at the next change it leaves again), a full disk (the first node's data dir
is a tmpfs: kvnode.check.disk). Blocking calls: the nemesis runs them in threads.

Its nodes keep their data and logs in ``DIRECTORY/node-PORT`` and ``DIRECTORY/logs``.
"""

from __future__ import annotations

import dataclasses
import random
import secrets
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from kvnode.check.disk import FullDisk
from kvnode.check.nemesis import Fault
from kvnode.check.netns import Hosts, address
from kvnode.config import NodeConfig, ReplicationFactor, node_url
from kvnode.ops.local_cluster import start_local_cluster
from kvnode.ops.node_http import fetch
from kvnode.ops.ports import free_ports
from kvnode.ops.processes import NodeProcess

__all__ = ["CLOCK_OFFSETS_MS", "LocalFaults", "LocalNodes"]

# Within the maximum skew (5 s by default) the contract orders writes as they happened; beyond it the node
# must fence itself (refuse to coordinate) and lose nothing either.
CLOCK_OFFSETS_MS = (500, 2_000, 4_000, 60_000)
CHANGE_TIMEOUT_S = 120.0  # for a join or a leave to complete
_POLL_S = 0.2


class LocalNodes:
    """Nodes of one cluster on this machine, by URL; ``members`` are those in the membership now."""

    def __init__(
        self,
        directory: Path,
        size: int,
        replication_factor: int,
        hosts: Hosts | None = None,
        disk: bool = False,
    ) -> None:
        self.directory = directory
        self.hosts = hosts
        self.disk: FullDisk | None = None
        self._want_disk = disk
        self._size = size
        self._base = NodeConfig(
            data_dir=directory,
            cluster_secret=secrets.token_hex(16).encode(),
            replication_factor=ReplicationFactor(replication_factor),
        )
        self.nodes: dict[str, NodeProcess] = {}
        self.members: list[str] = []
        self.joined: list[str] = []  # members that joined during the check, newest last

    def start(self) -> None:
        cluster = start_local_cluster(
            self._base, self._size, self._make, log_dir=self.directory / "logs", configure=self._configure
        )
        self.nodes = {node.url: node for node in cluster}
        self.members = list(self.nodes)

    def _configure(self, index: int, config: NodeConfig, _spare: list[int]) -> NodeConfig:
        if self.hosts is not None:
            ports = [urllib.parse.urlsplit(url).port or 0 for url in config.cluster]
            urls = tuple(node_url(address(host), port) for host, port in enumerate(ports))
            config = dataclasses.replace(config, host=address(index), cluster=urls)
        if index == 0 and self._want_disk:
            self.disk = FullDisk(config.data_dir)
        return config

    def _make(self, config: NodeConfig, log_path: Path | None) -> NodeProcess:
        node = NodeProcess(config, log_path)
        if self.hosts is not None:
            node.argv = self.hosts.wrap(node.argv, self.host_of(config.url))
        return node

    def host_of(self, url: str) -> int:
        """The namespace host a node runs in (with hosts)."""
        return int((urllib.parse.urlsplit(url).hostname or "").rsplit(".", 1)[1]) - 1

    def kill(self, url: str) -> None:
        self.nodes[url].kill()

    def revive(self, url: str) -> None:
        """Start a node that is down again, as it was."""
        if not self.nodes[url].running:
            self.nodes[url].start()

    def freeze(self, url: str) -> None:
        self.nodes[url].freeze()

    def resume(self, url: str) -> None:
        self.nodes[url].resume()

    def restart(self, url: str, clock_offset_ms: int = 0) -> None:
        """Stop the node (SIGTERM) and start it again, its clock shifted by ``clock_offset_ms``."""
        node = self.nodes[url]
        node.stop()
        again = self._make(dataclasses.replace(node.config, clock_offset_ms=clock_offset_ms), node.log_path)
        self.nodes[url] = again
        again.start()

    def join(self) -> str:
        """Start a new node that joins through the first member; its URL, once it is a member."""
        port = free_ports(1)[0]
        host = "127.0.0.1" if self.hosts is None else self.hosts.add()
        name = f"node-{port}" if self.hosts is None else f"node-{host}-{port}"
        config = NodeConfig(
            host=host,
            port=port,
            data_dir=self.directory / name,
            join=self.members[0],
            cluster_secret=self._base.cluster_secret,
        )
        node = self._make(config, self.directory / "logs" / f"{name}.log")
        self.nodes[node.url] = node
        node.start()
        _until(lambda: _joined(node), f"{node.url} to join")
        self.members.append(node.url)
        self.joined.append(node.url)
        return node.url

    def leave(self, url: str) -> None:
        """The member leaves (asked of the first member); once out of the membership it is stopped."""
        self.members.remove(url)  # the workers stop sending to it first
        seed = self.members[0]
        fetch(seed, None, None, "/v0/leave?" + urllib.parse.urlencode({"member": url}), "POST")
        _until(lambda: url not in fetch(seed, None, None)["cluster"], f"{url} to leave")
        self.nodes[url].stop()
        if url in self.joined:
            self.joined.remove(url)

    def heal(self) -> None:
        """Every member running, awake, with its own clock; the disk freed."""
        if self.disk is not None:
            self.disk.free()
        for url in self.members:
            node = self.nodes[url]
            node.resume()
            if node.config.clock_offset_ms:
                self.restart(url)
            self.revive(url)

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def _joined(node: NodeProcess) -> bool:
    status = node.status()
    return status is not None and node.url in status["cluster"] and not status["joining"]


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CHANGE_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting {CHANGE_TIMEOUT_S:.0f} s for {what}")
        time.sleep(_POLL_S)


class LocalFaults:
    """Each fault kind on a :class:`LocalNodes` (see kvnode.check.nemesis.Faults)."""

    def __init__(self, nodes: LocalNodes, isolation: str) -> None:
        """``isolation``: why partitions and full disks cannot be made here ("" where they can)."""
        self.nodes = nodes
        self._isolation = isolation

    def unavailable(self, kind: str) -> str:
        if kind == "partition" and self.nodes.hosts is None:
            return f"partition skipped: {self._isolation or 'not asked for at start'}"
        if kind == "disk" and self.nodes.disk is None:
            return f"disk skipped: {self._isolation or 'not asked for at start'}"
        return ""

    def targets(self) -> list[str]:
        return list(self.nodes.members)

    def begin(self, kind: str, rng: random.Random) -> Fault:
        nodes = self.nodes
        victim = rng.choice(nodes.members)
        if kind == "kill":
            nodes.kill(victim)
            return Fault(kind, victim, "kill -9")
        if kind == "pause":
            nodes.freeze(victim)
            return Fault(kind, victim, "SIGSTOP")
        if kind == "partition":
            assert nodes.hosts is not None
            others = [nodes.host_of(url) for url in nodes.members if url != victim]
            nodes.hosts.cut(nodes.host_of(victim), others)
            return Fault(kind, victim, "cut from every other member")
        if kind == "clock":
            offset = rng.choice((-1, 1)) * rng.choice(CLOCK_OFFSETS_MS)
            nodes.restart(victim, offset)
            return Fault(kind, victim, f"clock {offset:+d} ms")
        if kind == "membership":
            return self._change()
        assert kind == "disk" and nodes.disk is not None
        nodes.disk.fill()
        return Fault(kind, nodes.members[0], "data disk full")

    def _change(self) -> Fault:
        """A join, or after one a leave (of the newest newcomer: the cluster keeps its first members)."""
        nodes = self.nodes
        if nodes.joined:
            leaving = nodes.joined[-1]
            nodes.leave(leaving)
            return Fault("membership", leaving, "left", done=True)
        return Fault("membership", nodes.join(), "joined", done=True)

    def end(self, fault: Fault) -> None:
        nodes = self.nodes
        if fault.kind == "kill":
            nodes.revive(fault.target)
        elif fault.kind == "pause":
            nodes.resume(fault.target)
        elif fault.kind == "partition":
            assert nodes.hosts is not None
            others = [nodes.host_of(url) for url in nodes.members if url != fault.target]
            nodes.hosts.mend(nodes.host_of(fault.target), others)
        elif fault.kind == "clock":
            nodes.restart(fault.target)
        elif fault.kind == "disk" and nodes.disk is not None:
            nodes.disk.free()

    def heal(self) -> None:
        self.nodes.heal()
