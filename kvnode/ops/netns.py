"""Hosts made of Linux network namespaces (root only): the mechanics that the partitions of ``check``
(kvnode.check.netns), the WAN test bed (loadtest.netns) and the suite's multi-host tests
(tests/namespaces.py) share.

Every namespace is named ``PREFIX-ROLE``. The bridges that join the hosts live in a namespace of their
own, ``PREFIX-br``; each host's veth pair is made there, its other end born straight in the host's
namespace as ``eth0``, so no interface, address or route ever appears in the machine's own namespace,
and deleting the namespaces removes everything. iproute2's ``ip`` does the work (:func:`run_ip`: a
failure is :class:`IpCommandFailed`, with what ``ip`` said); :func:`inside` runs a command in a
namespace and :func:`enter_namespace` moves the calling thread into one. A PREFIX that ends with the
pid of the process that made it (:func:`run_prefix`) lets a later run remove what a killed one left
(:func:`remove_leftovers`).

>>> hosts = NamespaceHosts(run_prefix("kvmh"))
>>> hosts.name("client") == f"kvmh-{os.getpid()}-client", hosts.bridges_namespace == hosts.name("br")
(True, True)
>>> leftover_namespaces(["kvmh-1-br", "kvmh-2-br", "other-1-br"], "kvmh", lambda pid: pid == 2)
['kvmh-1-br']
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "NETNS_DIR",
    "IpCommandFailed",
    "NamespaceHosts",
    "enter_namespace",
    "inside",
    "ip_binary",
    "leftover_namespaces",
    "libc_call",
    "namespaces_unavailable",
    "remove_leftovers",
    "run",
    "run_ip",
    "run_prefix",
    "same_namespace",
]

_COMMAND_S = 30.0  # generous: an `ip` run waits for the kernel's locks on a machine shared with others
_CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")  # where `ip netns add` names namespaces
_NO_IP = "no `ip` binary (iproute2)"


class IpCommandFailed(OSError):
    """A command the namespaces need (``ip``, ``mount``, ``sysctl``) failed; the message names it and
    says what it said."""


def ip_binary() -> str | None:
    """iproute2's ``ip``, also where root's PATH has it and another's may not."""
    return shutil.which("ip", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def run(argv: Sequence[str]) -> str:
    """Run ``argv``; its output. Raises IpCommandFailed with the command (named by its program's name,
    not its path) and its complaint."""
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=_COMMAND_S)
    if result.returncode != 0:
        command = " ".join([Path(argv[0]).name, *argv[1:]])
        raise IpCommandFailed(f"{command}: {result.stderr.strip()}")
    return result.stdout


def run_ip(*args: str) -> str:
    """``ip ARGS``; its output (see :func:`run`)."""
    ip = ip_binary()
    if ip is None:
        raise IpCommandFailed(_NO_IP)
    return run([ip, *args])


def inside(namespace: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run in ``namespace`` (``ip netns exec`` execs it: the PID is the command's own)."""
    ip = ip_binary()
    if ip is None:
        raise IpCommandFailed(_NO_IP)
    return [ip, "netns", "exec", namespace, *argv]


def namespaces_unavailable() -> str:
    """Why network namespaces cannot be made here, in a few words; "" where they can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are a Linux feature"
    if ip_binary() is None:
        return f"{_NO_IP}: cannot create network namespaces"
    if os.geteuid() != 0:
        return "creating network namespaces needs root; this process is not root"
    return ""


def libc_call(name: str, *args: int) -> None:
    """The C library's ``name(*args)`` (``setns``, ``unshare``); OSError with its errno if it fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def same_namespace(proc_path: str, namespace: str) -> bool:
    """Whether ``proc_path`` (a /proc/.../ns/net) is the network namespace named ``namespace``."""
    return os.stat(proc_path).st_ino == os.stat(NETNS_DIR / namespace).st_ino


def enter_namespace(namespace: str) -> None:
    """Move the calling thread (only it: the network namespace is per thread; threads and processes it
    starts later follow it) into ``namespace``."""
    fd = os.open(NETNS_DIR / namespace, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc_call("setns", fd, _CLONE_NEWNET)
    finally:
        os.close(fd)
    if not same_namespace("/proc/thread-self/ns/net", namespace):
        raise OSError(f"this thread is not in {namespace}")


def run_prefix(kind: str) -> str:
    """The prefix of the namespaces this process makes: ``KIND-PID``."""
    return f"{kind}-{os.getpid()}"


def leftover_namespaces(names: Iterable[str], kind: str, is_running: Callable[[int], bool]) -> list[str]:
    """The namespaces an earlier run of ``kind`` left behind: its prefix, and that run's process gone.
    Anything else, including a live run's namespaces, is not ours to remove."""
    pattern = re.compile(rf"{re.escape(kind)}-(\d+)-[a-z0-9]+")
    return [
        name
        for name in names
        if (match := pattern.fullmatch(name)) is not None and not is_running(int(match[1]))
    ]


def remove_leftovers(kind: str) -> None:
    """Delete the namespaces of earlier runs of ``kind`` whose process is gone. An earlier process with
    this very pid cannot be running: its namespaces are leftovers too."""
    names = [line.split()[0] for line in run_ip("netns", "list").splitlines() if line.strip()]
    gone = leftover_namespaces(names, kind, lambda pid: pid != os.getpid() and Path(f"/proc/{pid}").exists())
    for name in gone:
        with contextlib.suppress(IpCommandFailed):
            run_ip("netns", "delete", name)


@dataclass
class NamespaceHosts:
    """Namespaces ``PREFIX-ROLE``, each host's on a bridge in ``PREFIX-br`` (see the module doc); every
    one made is in ``namespaces``, for :meth:`remove`."""

    prefix: str
    namespaces: list[str] = field(default_factory=list)

    def name(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    @property
    def bridges_namespace(self) -> str:
        """Where the bridges are (and, with several subnets, the router between them)."""
        return self.name("br")

    def add_namespace(self, role: str) -> str:
        """A namespace for ``role``, its loopback up; its name."""
        name = self.name(role)
        self.namespaces.append(name)  # before: a failed add may still have left the name behind
        run_ip("netns", "add", name)
        run_ip("-n", name, "link", "set", "lo", "up")
        return name

    def add_bridge(self, bridge: str, address: str | None = None) -> None:
        """A bridge named ``bridge`` in the bridges' namespace (made with the first bridge), up, with
        ``address`` (``a.b.c.d/len``) on it where it routes."""
        if self.bridges_namespace not in self.namespaces:
            self.add_namespace("br")
        run_ip("-n", self.bridges_namespace, "link", "add", bridge, "type", "bridge")
        if address is not None:
            run_ip("-n", self.bridges_namespace, "addr", "add", address, "dev", bridge)
        run_ip("-n", self.bridges_namespace, "link", "set", bridge, "up")

    def attach(self, role: str, bridge: str, address: str) -> str:
        """A namespace for ``role`` whose eth0, with ``address`` (``a.b.c.d/len``), is a port of
        ``bridge`` (named ``vROLE`` there); its name."""
        host, bridges = self.add_namespace(role), self.bridges_namespace
        # Created in the bridges' namespace, its peer born in the host's: never in the machine's.
        # Interface names need only be unique within their namespace.
        port = f"v{role}"
        run_ip("-n", bridges, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host)
        run_ip("-n", bridges, "link", "set", port, "master", bridge, "up")
        run_ip("-n", host, "addr", "add", address, "dev", "eth0")
        run_ip("-n", host, "link", "set", "eth0", "up")
        return host

    def remove(self) -> None:
        """Delete every namespace made, which deletes the bridges and veths in them."""
        for name in reversed(self.namespaces):
            with contextlib.suppress(IpCommandFailed):
                run_ip("netns", "delete", name)
        self.namespaces.clear()
