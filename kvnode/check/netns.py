"""Hosts for ``check --local --nemesis partition``, made of network namespaces (root only): each node a
namespace with an address of its own in 198.51.100.0/24 (TEST-NET-2: documentation only, routed nowhere),
all on one bridge in a namespace of its own, and the check's client in one more, so a partition cuts
nodes apart while the client still reaches every one of them (as Jepsen's control node does). A cut is a
blackhole route each way between two hosts: packets vanish, as in a real partition, and a mend deletes it.

Everything lives in the check's own mount namespace (:func:`enter_private_mounts`, where the namespaces'
names are kept too), so nothing is left behind on the machine when the check and its nodes end, however
they end.

>>> address(0), cut_commands("kvcheck-1", 0, 2)
('198.51.100.1', [['ip', '-n', 'kvcheck-1-h0', 'route', 'add', 'blackhole', '198.51.100.3/32'], \
['ip', '-n', 'kvcheck-1-h2', 'route', 'add', 'blackhole', '198.51.100.1/32']])
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["Hosts", "address", "cut_commands", "enter_private_mounts", "isolation_unavailable"]

SUBNET = "198.51.100"
CLIENT_HOST = 100  # the check's own address: 198.51.100.100
_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_NETNS_DIR = Path("/run/netns")


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
    """Why partitions and a full disk cannot be made here, in a few words; empty where they can."""
    if not sys.platform.startswith("linux"):
        return "they need Linux"
    if os.geteuid() != 0:
        return "they need root"
    if shutil.which("ip") is None or shutil.which("mount") is None:
        return "they need iproute2's ip and mount"
    return ""


def _run(command: Sequence[str]) -> None:
    result = subprocess.run(list(command), capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise OSError(f"{' '.join(command)}: {result.stderr.strip()}")


def _libc_call(name: str, *args: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def enter_private_mounts() -> None:
    """Give this process a mount namespace of its own (while it has a single thread, before anything
    starts), whose mounts no one else sees and which ends with it and its children: the nodes' tmpfs, the
    namespaces' names (a tmpfs on /run/netns)."""
    _libc_call("unshare", _CLONE_NEWNS)
    _run(["mount", "--make-rprivate", "/"])
    _NETNS_DIR.mkdir(parents=True, exist_ok=True)
    _run(["mount", "-t", "tmpfs", "tmpfs", str(_NETNS_DIR)])


class Hosts:
    """Network namespaces on one bridge: ``PREFIX-h0``, ``-h1``... for the nodes, ``PREFIX-client`` for
    the check (see the module doc)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._bridge = f"{prefix}-br"
        self._hosts: list[int] = []

    def build(self, count: int) -> None:
        """The bridge, the client's namespace, and ``count`` hosts."""
        _run(["ip", "netns", "add", self._bridge])
        _run(["ip", "-n", self._bridge, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self._bridge, "link", "set", "br0", "up"])
        self._attach("client", CLIENT_HOST - 1)
        for _ in range(count):
            self.add()

    def add(self) -> str:
        """One more host; its address."""
        host = len(self._hosts)
        self._attach(f"h{host}", host)
        self._hosts.append(host)
        return address(host)

    def _attach(self, role: str, host: int) -> None:
        # The veth is made in the bridge's namespace, its peer born in the member's: the machine's own
        # namespace never sees an interface of the check's.
        name = f"{self.prefix}-{role}"
        _run(["ip", "netns", "add", name])
        _run(["ip", "-n", name, "link", "set", "lo", "up"])
        _run(
            [
                "ip",
                "-n",
                self._bridge,
                "link",
                "add",
                f"v{role}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                name,
            ]
        )
        _run(["ip", "-n", self._bridge, "link", "set", f"v{role}", "master", "br0", "up"])
        _run(["ip", "-n", name, "addr", "add", f"{address(host)}/24", "dev", "eth0"])
        _run(["ip", "-n", name, "link", "set", "eth0", "up"])

    def enter_client(self) -> None:
        """Move this process (its one thread: threads started later follow it) into the client's namespace."""
        fd = os.open(_NETNS_DIR / f"{self.prefix}-client", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _libc_call("setns", fd, _CLONE_NEWNET)
        finally:
            os.close(fd)

    def wrap(self, argv: Sequence[str], host: int) -> list[str]:
        """``argv`` run in host ``host``'s namespace (``ip netns exec`` execs it: same PID)."""
        return ["ip", "netns", "exec", f"{self.prefix}-h{host}", *argv]

    def cut(self, host: int, others: Sequence[int]) -> None:
        for other in others:
            for command in cut_commands(self.prefix, host, other):
                _run(command)

    def mend(self, host: int, others: Sequence[int]) -> None:
        for other in others:
            for command in cut_commands(self.prefix, host, other, "del"):
                _run(command)
