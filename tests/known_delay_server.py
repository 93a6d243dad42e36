"""A server whose latency is known, to check the load generator's percentiles against (and wrk2's).

``python -m tests.known_delay_server --port P --delay-ms D [--stall-after-s T --stall-ms S] [--status
C]`` answers every request (any path but ``/v0/status``, any method) 200 (or C) after D ms, and, T
seconds after its first request, stalls its whole event loop once for S ms, so every request that
arrives meanwhile waits behind the stall.

It runs on the standard asyncio loop, whose timers fire at their time or up to a millisecond later,
never earlier (uvloop's whole-millisecond timers can fire up to a millisecond early), so no answer comes
back in less than D ms.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from aiohttp import web


class KnownDelay:
    def __init__(self, delay_ms: float, stall_after_s: float | None, stall_ms: float, status: int) -> None:
        self.delay_s = delay_ms / 1000
        self.status = status
        self.stall_after_s = stall_after_s
        self.stall_s = stall_ms / 1000
        self.first_request: float | None = None

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        now = time.monotonic()
        if self.first_request is None:
            self.first_request = now
        if self.stall_after_s is not None and now - self.first_request >= self.stall_after_s:
            self.stall_after_s = None  # once
            time.sleep(self.stall_s)  # noqa: ASYNC251  # blocking on purpose: everything waits, as in a GC pause
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return web.Response(status=self.status, text="ok\n")


async def ready(request: web.Request) -> web.Response:
    return web.Response(text="ready\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.known_delay_server", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--stall-after-s", type=float, help="stall once, this long after the first request")
    parser.add_argument("--stall-ms", type=float, default=300.0)
    parser.add_argument("--status", type=int, default=200, help="the status every answer has")
    args = parser.parse_args(argv)
    server = KnownDelay(args.delay_ms, args.stall_after_s, args.stall_ms, args.status)
    app = web.Application()
    app.router.add_get("/v0/status", ready)  # readiness polls neither wait nor start the stall clock
    app.router.add_route("*", "/{tail:.*}", server.handle)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
