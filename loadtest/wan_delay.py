"""The delay line of the WAN test bed (:mod:`loadtest.netns`): a program that holds every packet the
router sends into a TUN device for half a round trip, then writes it back, where the kernel routes it on
to the other datacenter. It stands in for ``tc qdisc ... netem delay``, which kernels built without the
netem module (Firecracker's, some CI runners') lack.

    ip netns exec ROUTER python -m loadtest.wan_delay DEVICE --round-trip-ms 50

It attaches to DEVICE (a TUN device made with ``ip tuntap add dev DEVICE mode tun``, in the namespace it
runs in), prints ``attached`` once packets can flow, and on SIGTERM prints one JSON line of what it did:
packets passed, the most held at once, how late the latest left after it was due, how many left more than
a millisecond late, and its own CPU seconds, by which a report shows the line was not the bottleneck. It
asks to be scheduled before the hosts' processes (:func:`before_the_hosts`).
The delay is fixed, so packets leave in the order they came: the one due first is always the oldest.

>>> line = DelayLine(hold_s=0.025)
>>> line.put(b"syn", now=0.0); line.put(b"ack", now=0.01)
>>> line.wait_s(now=0.0), line.due(now=0.026), line.due(now=0.04), line.wait_s(now=0.04)
(0.025, [b'syn'], [b'ack'], None)
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import signal
import struct
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["ATTACHED", "DelayLine", "before_the_hosts", "main", "open_tun"]

ATTACHED = "attached"  # the line printed once the device is attached
LATE_S = 0.001  # a packet that leaves later than this after it was due is counted late
_TUNSETIFF = 0x400454CA  # from linux/if_tun.h
_IFF_TUN = 0x0001  # IP packets, no Ethernet header
_IFF_NO_PI = 0x1000  # no packet-information prefix: each read is one packet, as it is
_MAX_PACKET = 65536
_PRIORITY = 10  # SCHED_FIFO's, low among real-time ones: above every normal process, below the kernel's


class DelayLine:
    """Packets held ``hold_s`` each, in the order they came, and the figures of what passed (pure: the
    caller gives the time)."""

    def __init__(self, hold_s: float) -> None:
        if hold_s < 0:
            raise ValueError(f"a delay is not negative, got {hold_s}")
        self.hold_s = hold_s
        self._held: deque[tuple[float, bytes]] = deque()
        self.passed = 0
        self.most_held = 0
        self.late = 0  # packets that left more than LATE_S after they were due
        self.latest_s = 0.0  # the longest a packet waited past its due time

    def put(self, packet: bytes, now: float) -> None:
        self._held.append((now + self.hold_s, packet))
        self.most_held = max(self.most_held, len(self._held))

    def due(self, now: float) -> list[bytes]:
        """The packets due by ``now``, oldest first, taken out of the line."""
        leaving = []
        held = self._held
        while held and held[0][0] <= now:
            due_at, packet = held.popleft()
            leaving.append(packet)
            past = now - due_at
            if past > LATE_S:
                self.late += 1
            self.latest_s = max(self.latest_s, past)
        self.passed += len(leaving)
        return leaving

    def wait_s(self, now: float) -> float | None:
        """How long until the next packet is due (0 if it is), or None when none is held."""
        return max(0.0, self._held[0][0] - now) if self._held else None

    def figures(self) -> dict[str, Any]:
        return {
            "hold_ms": self.hold_s * 1000,
            "packets": self.passed,
            "most_held": self.most_held,
            "late_over_1ms": self.late,
            "latest_ms": round(self.latest_s * 1000, 3),
        }


def open_tun(device: str) -> int:
    """A non-blocking descriptor attached to the TUN ``device`` of this network namespace."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", device.encode(), _IFF_TUN | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class _Stop(Exception):
    """SIGTERM or SIGINT: print the figures and end."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def before_the_hosts() -> str:
    """Ask to run before the hosts' processes (real-time FIFO scheduling, as root may): a WAN does not
    wait for the machines' CPUs, and on a machine shared with the nodes a packet would otherwise leave
    whenever the scheduler got round to this process. The policy got, by name."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(_PRIORITY))
    except (OSError, AttributeError):  # not root, or not Linux: the plain scheduler, lateness counted
        return "other"
    return "fifo"


def run(fd: int, line: DelayLine, out: TextIO, policy: str = "other") -> None:
    """Pass packets from the device through the line and back until SIGTERM; then its figures on ``out``.
    A plain loop, not asyncio: this is every packet's path, and a loop turn costs a few microseconds."""
    clock = time.monotonic
    dropped = 0
    cpu = time.process_time()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    try:
        while True:
            select.select([fd], [], [], line.wait_s(clock()))
            now = clock()
            while True:  # every packet waiting, then those due
                try:
                    line.put(os.read(fd, _MAX_PACKET), now)
                except BlockingIOError:
                    break
            for packet in line.due(clock()):
                try:
                    os.write(fd, packet)
                except OSError:  # the kernel refused it (no buffer): lost, as on a real link
                    dropped += 1
    except _Stop:
        pass
    figures = {
        **line.figures(),
        "dropped": dropped,
        "cpu_s": round(time.process_time() - cpu, 3),
        "scheduling": policy,
    }
    print(json.dumps(figures), file=out, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.wan_delay", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("device", help="a TUN device of this network namespace (ip tuntap add ... mode tun)")
    parser.add_argument(
        "--round-trip-ms", type=float, required=True, help="each packet is held half of it (0: passed on)"
    )
    args = parser.parse_args(argv)
    if args.round_trip_ms < 0:
        parser.error(f"--round-trip-ms is not negative, got {args.round_trip_ms:g}")
    try:
        fd = open_tun(args.device)
    except OSError as error:
        print(f"loadtest.wan_delay: cannot attach to {args.device}: {error.strerror}", file=sys.stderr)
        return 1
    policy = before_the_hosts()
    print(ATTACHED, flush=True)
    run(fd, DelayLine(args.round_trip_ms / 2000), sys.stdout, policy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
