"""Hosts for ``check --local --nemesis partition``, made of network namespaces (root only): each node a
namespace with an address of its own in 198.51.100.0/24 (TEST-NET-2: documentation only, routed nowhere),
all on one bridge in a namespace of its own, and the check's client in one more, so a partition cuts
nodes apart while the client still reaches every one of them (as Jepsen's control node does). A cut is a
blackhole route each way between two hosts: packets vanish, as in a real partition, and a mend deletes it.

The hosts are built with kvnode.ops.netns, as the WAN test bed's and the suite's are. Everything lives in
the check's own mount namespace (:func:`enter_private_mounts`, where the namespaces' names are kept too),
so nothing is left behind on the machine when the check and its nodes end, however they end.

>>> address(0), cut_commands("kvcheck-1", 0, 2)
('198.51.100.1', [['ip', '-n', 'kvcheck-1-h0', 'route', 'add', 'blackhole', '198.51.100.3/32'], \
['ip', '-n', 'kvcheck-1-h2', 'route', 'add', 'blackhole', '198.51.100.1/32']])
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass

from kvnode.ops.netns import (
    NETNS_DIR,
    NamespaceHosts,
    enter_namespace,
    inside,
    libc_call,
    namespaces_unavailable,
    run,
)

__all__ = ["Hosts", "address", "cut_commands", "enter_private_mounts", "isolation_unavailable"]

SUBNET = "198.51.100"
CLIENT_HOST = 100  # the check's own address: 198.51.100.100
BRIDGE = "br0"
_CLONE_NEWNS = 0x00020000


def address(host: int) -> str:
    """Node ``host``'s address (from 0)."""
    return f"{SUBNET}.{host + 1}"


def cut_commands(prefix: str, one: int, other: int, verb: str = "add") -> list[list[str]]:
    """The commands that cut host ``one`` from host ``other`` both ways (``verb`` "del" mends it)."""
    return [
        ["ip", "-n", f"{prefix}-h{one}", "route", verb, "blackhole", f"{address(other)}/32"],
        ["ip", "-n", f"{prefix}-h{other}", "route", verb, "blackhole", f"{address(one)}/32"],
    ]


def isolation_unavailable() -> str:
    """Why partitions and a full disk cannot be made here, in a few words; empty where they can: network
    namespaces (as kvnode.ops.netns says) and mounts of the check's own."""
    why = namespaces_unavailable()
    if not why and shutil.which("mount") is None:
        why = "no `mount` binary (util-linux): cannot give the check mounts of its own"
    return why


def enter_private_mounts() -> None:
    """Give this process a mount namespace of its own (while it has a single thread, before anything
    starts), whose mounts no one else sees and which ends with it and its children: the nodes' tmpfs, the
    namespaces' names (a tmpfs on /run/netns)."""
    libc_call("unshare", _CLONE_NEWNS)
    run(["mount", "--make-rprivate", "/"])
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "tmpfs", "tmpfs", str(NETNS_DIR)])


@dataclass
class Hosts(NamespaceHosts):
    """Network namespaces on one bridge: ``PREFIX-h0``, ``-h1``... for the nodes, ``PREFIX-client`` for
    the check (see the module doc)."""

    count: int = 0  # the nodes' hosts

    def build(self, count: int) -> None:
        """The bridge, the client's namespace, and ``count`` hosts."""
        self.add_bridge(BRIDGE)
        self.attach("client", BRIDGE, f"{address(CLIENT_HOST - 1)}/24")
        for _ in range(count):
            self.add()

    def add(self) -> str:
        """One more host; its address."""
        host = self.count
        self.attach(f"h{host}", BRIDGE, f"{address(host)}/24")
        self.count += 1
        return address(host)

    def enter_client(self) -> None:
        """Move this process (its one thread: threads started later follow it) into the client's namespace."""
        enter_namespace(self.name("client"))

    def wrap(self, argv: Sequence[str], host: int) -> list[str]:
        """``argv`` run in host ``host``'s namespace (``ip netns exec`` execs it: same PID)."""
        return inside(self.name(f"h{host}"), argv)

    def cut(self, host: int, others: Sequence[int]) -> None:
        for other in others:
            for command in cut_commands(self.prefix, host, other):
                run(command)

    def mend(self, host: int, others: Sequence[int]) -> None:
        for other in others:
            for command in cut_commands(self.prefix, host, other, "del"):
                run(command)
