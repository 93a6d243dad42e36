"""Loopback ports for local servers: free ones found below the kernel's ephemeral range, and a start tried
again on fresh ports when another process took one first.

>>> len(free_ports(3))
3
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kvnode.ops.processes import NodeStartError

__all__ = ["START_ATTEMPTS", "free_ports", "start_on_free_ports"]

START_ATTEMPTS = 3  # start_on_free_ports: fresh ports this many times in all
_LOWEST_PORT = 10_000  # the ports below are left to well-known services


def _ephemeral_ports() -> range:
    """The kernel's range for the local ports of outgoing connections."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def free_ports(count: int) -> list[int]:
    """``count`` consecutive loopback ports free right now (bound together), below the ephemeral range:
    there the kernel picks the local port of every outgoing connection, so our own nodes' connections
    could take the port of a node stopped to be started again, or of one started later. Where that
    range leaves no room below it, whatever bind(0) gives (distinct, not consecutive)."""
    ephemeral = _ephemeral_ports()
    for _ in range(100):
        if ephemeral.start - count > _LOWEST_PORT:
            start = random.randrange(_LOWEST_PORT, ephemeral.start - count)
            ports = list(range(start, start + count))
        else:
            ports = [0] * count
        sockets = []
        try:
            for port in ports:
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return [sock.getsockname()[1] for sock in sockets]
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise OSError(f"found no {count} free consecutive loopback ports below {ephemeral.start}")


T = TypeVar("T")


def start_on_free_ports(count: int, start: Callable[[list[int]], T], attempts: int = START_ATTEMPTS) -> T:
    """``start(ports)`` with ``count`` free loopback ports, and what it returns.

    A port found free can be taken by another process on this machine before our server binds it. Then
    ``start`` fails with a NodeStartError whose port is taken, and is called again on a fresh set of
    ports: the whole set changes, since every node of a cluster is given the same list. Any other
    failure, or the last attempt's, is raised.
    """
    for _ in range(attempts - 1):
        try:
            return start(free_ports(count))
        except NodeStartError as error:
            if not error.port_taken:
                raise
    return start(free_ports(count))
