"""Admission control: how many client entity requests are in progress, and shedding beyond the limit.

Beyond ``--max-inflight`` /v0/entity requests in progress, a new one is answered 503 with Retry-After at
once, before its body is read, so a shed request writes nothing (Cassandra's native-transport limit is
the model). The count is a plain integer around the handler: no task or middleware per request. The
``kvnode_inflight_requests`` metric reads the same counter.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from aiohttp import web

__all__ = ["Admission", "Handler"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.inflight = 0  # requests between arrival and answer
        self.shed = 0  # requests answered 503 because ``limit`` were in progress

    def admitted(self, handler: Handler) -> Handler:
        """The handler, counted in flight from its start to its answer, or shed with 503 beyond the limit."""

        @functools.wraps(handler)
        async def counted(request: web.Request) -> web.StreamResponse:
            if self.inflight >= self.limit:
                self.shed += 1
                return web.Response(
                    status=503,
                    text=f"overloaded: {self.inflight} requests in progress; retry\n",
                    headers={"Retry-After": "1"},
                )
            self.inflight += 1
            try:
                return await handler(request)
            finally:
                self.inflight -= 1

        return counted
