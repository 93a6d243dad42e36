"""A one-process stand-in for a kvnode cluster, served in the test's event loop, implementing just what
``python -m kvnode check`` asks (``/v0/status``; GET, PUT and DELETE of ``/v0/entity`` with the ETag,
``If-Match``, ``If-None-Match: *`` and ``serial=1`` of the contract's conditional writes), correctly, or
with one planted defect that breaks a guarantee the check must catch:

- ``lose``: every third unconditional PUT is answered 201 and never stored;
- ``stale``: reads return the first value ever written to the key (a replica that missed every later write);
- ``racy``: a conditional write checks its condition, then waits for another conditional write of the same
  key (half a second at most) before it writes: both may be granted on the same version.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from tests.loopback import served

Defect = Literal["", "lose", "stale", "racy"]
_PARTNER_WAIT_S = 0.5


@dataclass
class FaultyServer:
    defect: Defect = ""
    url: str = ""
    versions: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # key: (version, value)
    first: dict[str, str] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)  # keys whose acknowledged PUT was never stored (lose)
    raced: list[tuple[str, str]] = field(default_factory=list)  # values granted together (racy)
    _puts: int = 0
    _version: int = 0
    _waiting: dict[str, asyncio.Future[str]] = field(default_factory=dict)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v0/status", self._status)
        app.router.add_get("/v0/entity", self._get)
        app.router.add_put("/v0/entity", self._write)
        app.router.add_delete("/v0/entity", self._write)
        return app

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response({"url": self.url, "pid": os.getpid(), "cluster": [self.url]})

    def _etag(self, key: str) -> dict[str, str]:
        version, _ = self.versions.get(key, (0, None))
        return {"ETag": f'"{version}"'} if version else {}

    async def _get(self, request: web.Request) -> web.Response:
        key = request.query["id"]
        _, value = self.versions.get(key, (0, None))
        if self.defect == "stale" and key in self.first:
            value = self.first[key]
        if value is None:
            return web.Response(status=404)
        return web.Response(body=value.encode(), headers=self._etag(key))

    async def _write(self, request: web.Request) -> web.Response:
        key = request.query["id"]
        value = (await request.read()).decode() if request.method == "PUT" else None
        match, none_match = request.headers.get("If-Match"), request.headers.get("If-None-Match")
        conditional = match is not None or none_match is not None
        current_version, current = self.versions.get(key, (0, None))
        holds = (match == f'"{current_version}"') if match is not None else current is None
        if conditional and not holds:
            return web.Response(status=412, text="precondition failed\n", headers=self._etag(key))
        if conditional and self.defect == "racy":
            await self._meet_a_partner(key, value or "-")
        if not conditional and value is not None:
            self._puts += 1
            if self.defect == "lose" and self._puts % 3 == 0:
                self.dropped.add(key)
                return web.Response(status=201)
        self._version += 1
        self.versions[key] = (self._version, value)
        if value is not None:
            self.first.setdefault(key, value)
        return web.Response(status=201 if value is not None else 202, headers=self._etag(key))

    async def _meet_a_partner(self, key: str, value: str) -> None:
        """Wait (at most half a second) for another conditional write of ``key`` that passed its check."""
        partner = self._waiting.pop(key, None)
        if partner is not None:
            partner.set_result(value)
            return
        waiting = asyncio.get_running_loop().create_future()
        self._waiting[key] = waiting
        with contextlib.suppress(TimeoutError):
            self.raced.append((value, await asyncio.wait_for(waiting, _PARTNER_WAIT_S)))
        if self._waiting.get(key) is waiting:
            del self._waiting[key]


@contextlib.asynccontextmanager
async def serving(defect: Defect = "") -> AsyncIterator[FaultyServer]:
    """A stand-in cluster (with ``defect``) served until the block ends."""
    server = FaultyServer(defect)
    async with served(server.app()) as url:
        server.url = url
        yield server
