"""``python -m profiling.transport``: the replica channel's round trip over loopback TCP against a Unix
socket, for peers on one host (docs/replica-channel.md, "Same-host peers").

The real client end (kvnode.replica.channel.client.ClientChannel) against the real server end
(kvnode.replica.channel.server.ReplicaServer, in aiohttp, under uvloop) in a second process that listens
on both; a frame of 1 and of 16 READ calls is sent and its replies awaited, ``--round-trips`` times a
batch, the two transports' batches interleaved in a random order ``--batches`` times, so a machine that
slows down slows both alike. Each batch's wall time, the client's CPU time and the server's (which it
reports over HTTP) are taken per call; the table gives each transport's medians and, batch by batch, the
ratio Unix / TCP: its median and interquartile range.

The server answers from a constant (no storage), so the transport's share of a call is as large here as it
gets: a node adds its storage, the coordinator's work and aiohttp's request around every call.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web

from kvnode.ops.argtypes import positive_int
from kvnode.ops.ports import free_ports
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.channel.client import ClientChannel
from kvnode.replica.channel.server import PeerGate, ReplicaServer
from kvnode.replica.errors import ReplicaError

__all__ = ["main"]

_VALUE = b"v" * 130  # a READ's answer: about a stored 100-byte value with its record header
_LIMITS = wire.Limits.for_body(1 << 20)
_FRAME_CALLS = (1, 16)
_TRANSPORTS = ("tcp", "unix")
_WARM_UP = 20  # round trips of each kind before the measured batches
_CPU_PATH = "/cpu"


def _serve(port: int, path: str) -> None:
    """The server end on 127.0.0.1:``port`` and on the Unix socket ``path``, until killed; it prints
    "ready" once both listen, and answers GET /cpu with its CPU time so far."""

    async def serve() -> None:
        answerers = Answerers()
        answerers.register(wire.Op.READ, lambda call: (wire.Status.FOUND, _VALUE))
        server = ReplicaServer(PeerGate(None, _LIMITS), answerers, lambda: b"")
        app = web.Application()
        server.add_routes(app)

        async def cpu(request: web.Request) -> web.Response:
            return web.Response(text=repr(time.process_time()))

        app.router.add_get(_CPU_PATH, cpu)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await web.UnixSite(runner, path).start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    uvloop.run(serve())


class _Replies:
    """The channels' listener: counts the replies awaited and wakes the sender when all have come."""

    def __init__(self) -> None:
        self.awaited = 0
        self.all_in: asyncio.Future[None] | None = None
        self.closing = False  # the measurement is over: the channels close

    def heard_from(self, channel: ClientChannel) -> None:
        pass

    def received(self, channel: ClientChannel, frame: bytes) -> None:
        self.awaited -= len(wire.decode_replies(frame))
        if self.awaited <= 0 and self.all_in is not None and not self.all_in.done():
            self.all_in.set_result(None)

    def ponged(self, channel: ClientChannel, payload: bytes) -> None:
        pass

    def writable(self, channel: ClientChannel) -> None:
        pass

    def drop(self, channel: ClientChannel, error: ReplicaError, level: int = logging.WARNING) -> None:
        if not self.closing:
            raise SystemExit(f"profiling.transport: the channel dropped: {error}")


Sample = tuple[float, float, float]  # per call: wall, client CPU, server CPU (seconds)


async def _measure(
    port: int, path: str, batches: int, round_trips: int
) -> dict[tuple[str, int], list[Sample]]:
    loop = asyncio.get_running_loop()
    replies = _Replies()
    url = f"http://127.0.0.1:{port}"

    def channel() -> ClientChannel:
        return ClientChannel(replies, url, f"127.0.0.1:{port}", None, _LIMITS.max_frame)

    _, tcp = await loop.create_connection(channel, "127.0.0.1", port)
    _, unix = await loop.create_unix_connection(channel, path)
    channels = {"tcp": tcp, "unix": unix}
    for opened in channels.values():
        await opened.upgraded
    frames = {
        calls: b"".join(wire.encode_call(i + 1, wire.Op.READ, b"key%08d" % i) for i in range(calls))
        for calls in _FRAME_CALLS
    }

    async def round_trip(sent: ClientChannel, calls: int, times: int) -> None:
        for _ in range(times):
            replies.awaited, replies.all_in = calls, loop.create_future()
            sent.send(frames[calls])
            await replies.all_in

    samples: dict[tuple[str, int], list[Sample]] = {
        (name, calls): [] for name in _TRANSPORTS for calls in _FRAME_CALLS
    }
    async with aiohttp.ClientSession() as session:

        async def server_cpu() -> float:
            async with session.get(url + _CPU_PATH) as response:
                return float(await response.text())

        for opened in channels.values():
            for calls in _FRAME_CALLS:
                await round_trip(opened, calls, _WARM_UP)
        for _ in range(batches):
            order = list(_TRANSPORTS)
            random.shuffle(order)
            for name in order:
                for calls in _FRAME_CALLS:
                    server_before, client_before, wall_before = (
                        await server_cpu(),
                        time.process_time(),
                        time.perf_counter(),
                    )
                    await round_trip(channels[name], calls, round_trips)
                    wall, client = time.perf_counter() - wall_before, time.process_time() - client_before
                    server = await server_cpu() - server_before
                    per_call = round_trips * calls
                    samples[name, calls].append((wall / per_call, client / per_call, server / per_call))
    replies.closing = True
    for opened in channels.values():
        opened.transport.close()
    return samples


def _table(samples: dict[tuple[str, int], list[Sample]], batches: int, round_trips: int, command: str) -> str:
    lines = [
        f"The replica channel's round trip, per call: {batches} interleaved batches of {round_trips} round "
        f"trips a transport and frame size. By `{command}`.",
        "",
        "| frame | transport | wall, µs | client CPU, µs | server CPU, µs | both CPU, µs |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for calls in _FRAME_CALLS:
        for name in _TRANSPORTS:
            rows = samples[name, calls]
            wall, client, server = (statistics.median(row[i] for row in rows) * 1e6 for i in range(3))
            label = f"{calls} call{'s' if calls > 1 else ''}"
            lines.append(
                f"| {label} | {name} | {wall:.2f} | {client:.2f} | {server:.2f} | {client + server:.2f} |"
            )
    lines += [
        "",
        "| frame | Unix / TCP: wall | client CPU | server CPU | both CPU |",
        "|---|--:|--:|--:|--:|",
    ]
    for calls in _FRAME_CALLS:
        pairs = list(zip(samples["tcp", calls], samples["unix", calls], strict=True))
        cells = []
        for measure in range(4):

            def value(sample: Sample) -> float:
                return sample[1] + sample[2] if measure == 3 else sample[measure]  # noqa: B023

            ratios = [value(unix) / value(tcp) for tcp, unix in pairs]
            # inclusive: within the batches' own ratios (the default extrapolates, below 0 from 2 batches)
            quartiles = (
                statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else [ratios[0]] * 3
            )
            cells.append(f"{statistics.median(ratios):.3f} ({quartiles[0]:.3f}-{quartiles[2]:.3f})")
        lines.append(f"| {calls} call{'s' if calls > 1 else ''} | {' | '.join(cells)} |")
    lines += ["", "Ratios: the median of the batches' and, in brackets, their interquartile range."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiling.transport", description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=positive_int, default=30, help="batches a transport and frame size")
    parser.add_argument("--round-trips", type=positive_int, default=400, help="round trips a batch")
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(int(args.serve[0]), args.serve[1])
        return 0
    command = shlex.join(["python", "-m", "profiling.transport", *(sys.argv[1:] if argv is None else argv)])
    port = free_ports(1)[0]
    with tempfile.TemporaryDirectory(prefix="kvnode-transport-") as folder:
        path = str(Path(folder) / "replica.sock")
        argv_server = [sys.executable, "-m", "profiling.transport", "--serve", str(port), path]
        server = subprocess.Popen(argv_server, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                print("profiling.transport: the server did not start", file=sys.stderr)
                return 1
            samples = uvloop.run(_measure(port, path, args.batches, args.round_trips))
        finally:
            server.kill()
            server.wait()
    print(_table(samples, args.batches, args.round_trips, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
