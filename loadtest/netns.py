"""The WAN test bed's hosts, made of network namespaces with :mod:`kvnode.ops.netns` (as the check's and
the suite's are): each host a namespace with one address on its eth0, joined by bridges that live in a
namespace of their own (``PREFIX-br``), so nothing appears in the machine's own namespace and deleting
the namespaces removes everything.

Hosts of one subnet share a bridge. Hosts of two subnets are two datacenters: 198.51.100.0/24 and
203.0.113.0/24 (TEST-NET-2 and TEST-NET-3: documentation only, routed nowhere; they exist only inside
these namespaces). The bridges' namespace is then their router (each subnet's gateway is its .254), and
:meth:`NamespaceNetwork.delay` makes it a WAN: policy routing sends every packet that crosses from one
datacenter to the other into a TUN device, where :mod:`loadtest.wan_delay` holds it half the round trip
and writes it back, and the kernel routes it on. Within a datacenter packets never leave its bridge. (A
netem qdisc would do the same in the kernel; the kernels this runs on are built without it.)

It needs Linux, root and iproute2's ``ip``, and /dev/net/tun for a delay: :func:`unavailable` says why
not, in a few words. Every namespace is named ``PREFIX-ROLE``, PREFIX ending with the pid of the process
that made it (kvnode.ops.netns.run_prefix), so that a later run removes what a killed one left.

>>> datacenter_address(0, 1), datacenter_address(1, 3)
('198.51.100.1', '203.0.113.3')
>>> [" ".join(rule) for rule in crossing_rules(["198.51.100", "203.0.113"])]
['iif br0 to 203.0.113.0/24 lookup 100', 'iif br1 to 198.51.100.0/24 lookup 100']
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvnode.ops.netns import (
    IpCommandFailed,
    NamespaceHosts,
    enter_namespace,
    inside,
    namespaces_unavailable,
    run,
    run_ip,
)
from kvnode.ops.processes import die_with_parent
from loadtest.wan_delay import ATTACHED

__all__ = [
    "DATACENTER_SUBNETS",
    "NamespaceNetwork",
    "connect_round_trips_ms",
    "crossing_rules",
    "datacenter_address",
    "listening_socket",
    "unavailable",
]

DATACENTER_SUBNETS = ("198.51.100", "203.0.113")  # TEST-NET-2, TEST-NET-3 (RFC 5737): a /24 each
GATEWAY = 254  # each subnet's router address, where hosts of two subnets send what is not their own
WAN_DEVICE = "wan0"  # the TUN device in the bridges' namespace that the delay line reads
_WAN_TABLE = "100"  # the routing table that sends a crossing packet into the device
_ATTACH_S = 10.0  # for the delay line to attach to its device


def unavailable(delay: bool = False) -> str:
    """Why namespaces (and, with ``delay``, a delay line) cannot be made here, in a few words; "" where
    they can."""
    reason = namespaces_unavailable()
    if reason:
        return reason
    if delay and not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        return "no /dev/net/tun: the WAN delay line needs a TUN device"
    return ""


def datacenter_address(datacenter: int, host: int) -> str:
    """Host ``host`` (1 to 253) of datacenter ``datacenter`` (0 or 1)."""
    return f"{DATACENTER_SUBNETS[datacenter]}.{host}"


def crossing_rules(subnets: Sequence[str]) -> list[list[str]]:
    """The policy rules (``ip rule add`` arguments) that send what comes in on one subnet's bridge for
    another subnet into the delay line's routing table; what the line writes back comes in on its
    device, which no rule names, so the main table routes it on."""
    return [
        ["iif", f"br{index}", "to", f"{other}.0/24", "lookup", _WAN_TABLE]
        for index, subnet in enumerate(subnets)
        for other in subnets
        if other != subnet
    ]


def listening_socket(namespace: str, address: str, port: int) -> socket.socket:
    """A TCP socket listening on ``address:port`` in ``namespace`` (made by a thread that enters it; a
    socket stays in the namespace it was made in). Its backlog answers connects: nothing need accept."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            enter_namespace(namespace)
            made.append(socket.create_server((address, port), backlog=1024))
        except BaseException as error:  # handed to the caller
            made.append(error)

    thread = threading.Thread(target=make, name=f"listen in {namespace}")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def connect_round_trips_ms(address: str, port: int, count: int) -> list[float]:
    """``count`` TCP connects to ``address:port`` from the calling thread's namespace, in milliseconds:
    each returns once the SYN-ACK is back, one round trip."""
    times = []
    for _ in range(count):
        began = time.perf_counter()
        with socket.create_connection((address, port), timeout=5):
            times.append((time.perf_counter() - began) * 1000)
    return times


@dataclass
class NamespaceNetwork(NamespaceHosts):
    """Network namespaces joined by bridges, routed between subnets, with a delay line (see the module
    doc)."""

    subnets: list[str] = field(default_factory=list)
    delay_line: subprocess.Popen[str] | None = None
    routed_through_line: bool = False  # the device and the rules made (they stay until the end)

    def build(self, members: Mapping[str, str]) -> None:
        """The bridges' namespace, and for each member role a namespace with its address (a.b.c.HOST/24)
        on its eth0; each subnet a bridge, routed to the others when there are several."""
        self.subnets = list(dict.fromkeys(address.rsplit(".", 1)[0] for address in members.values()))
        routed = len(self.subnets) > 1
        for index, subnet in enumerate(self.subnets):
            self.add_bridge(f"br{index}", f"{subnet}.{GATEWAY}/24" if routed else None)
        if routed:
            run(inside(self.bridges_namespace, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]))
        for role, address in members.items():
            subnet = address.rsplit(".", 1)[0]
            member = self.attach(role, f"br{self.subnets.index(subnet)}", f"{address}/24")
            if routed:
                run_ip("-n", member, "route", "add", "default", "via", f"{subnet}.{GATEWAY}")

    def delay(self, round_trip_ms: float) -> None:
        """Hold every packet between two subnets half of ``round_trip_ms`` each way (0: through the delay
        line without holding it, to measure the line's own cost); called again, the new delay replaces the
        old. Raises IpCommandFailed if the line cannot be set up."""
        if len(self.subnets) < 2:
            raise IpCommandFailed("a delay goes between two subnets; this network has one")
        self.stop_delay()
        router = self.bridges_namespace
        if not self.routed_through_line:
            run_ip("-n", router, "tuntap", "add", "dev", WAN_DEVICE, "mode", "tun")
            run_ip("-n", router, "link", "set", WAN_DEVICE, "up")
            run_ip("-n", router, "route", "add", "default", "dev", WAN_DEVICE, "table", _WAN_TABLE)
            for rule in crossing_rules(self.subnets):
                run_ip("-n", router, "rule", "add", *rule)
            self.routed_through_line = True
        argv = [
            sys.executable,
            "-m",
            "loadtest.wan_delay",
            WAN_DEVICE,
            "--round-trip-ms",
            f"{round_trip_ms:g}",
        ]
        line = subprocess.Popen(
            inside(router, argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,
            cwd=Path(__file__).resolve().parent.parent,  # where `loadtest` imports from
        )
        self.delay_line = line
        assert line.stdout is not None
        ready, _, _ = select.select([line.stdout], [], [], _ATTACH_S)
        said = line.stdout.readline().strip() if ready else ""
        if said != ATTACHED:
            self.delay_line = None
            line.kill()
            _, complaint = line.communicate()
            why = complaint.strip().splitlines()[-1] if complaint.strip() else said or "no answer"
            raise IpCommandFailed(f"the delay line did not attach to {WAN_DEVICE}: {why}")

    def stop_delay(self) -> dict[str, Any]:
        """Stop the delay line (packets between subnets are then dropped, until the next :meth:`delay`);
        what it did (:mod:`loadtest.wan_delay`'s figures), or {} when none ran."""
        line, self.delay_line = self.delay_line, None
        if line is None:
            return {}
        if line.poll() is None:
            line.terminate()
        try:
            out, _ = line.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            line.kill()
            out, _ = line.communicate()
        last = out.strip().rsplit("\n", 1)[-1] if out.strip() else ""
        with contextlib.suppress(ValueError):
            figures: dict[str, Any] = json.loads(last)
            return figures
        return {}

    def remove(self) -> None:
        """Stop the delay line and delete every namespace made, which deletes the bridges, the veths and
        the TUN device in them."""
        self.stop_delay()
        super().remove()
