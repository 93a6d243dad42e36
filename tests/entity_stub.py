"""An in-process stand-in for a node's /v0/entity, for the load generator's tests: it answers at once,
fails the keys it is told to, and judges conditional writes against versions it numbers per key."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from tests.loopback import served


class Stub:
    """Answers at once with the operation's success status, or 504 for a key in ``fail``. A conditional
    write it judges against the versions it numbers per key (a GET names the key's in its ETag), and
    answers 504 for a key in ``unknown``."""

    def __init__(self) -> None:
        self.fail: set[str] = set()
        self.unknown: set[str] = set()
        self.keys: list[str] = []
        self.versions: dict[str, int] = {}

    async def handle(self, request: web.Request) -> web.Response:
        key = request.query["id"]
        self.keys.append(key)
        if key in self.fail:
            return web.Response(status=504)
        condition = request.headers.get("If-Match") or request.headers.get("If-None-Match")
        if condition is not None:
            return self._conditional(key, condition)
        version = self.versions.get(key)
        if request.method == "GET" and version is not None:
            return web.Response(status=200, body=b"v", headers={"ETag": f'"{version}"'})
        return web.Response(status={"GET": 200, "PUT": 201, "DELETE": 202}[request.method], body=b"v")

    def _conditional(self, key: str, condition: str) -> web.Response:
        version = self.versions.get(key)
        if key in self.unknown:
            return web.Response(status=504)
        if condition != ("*" if version is None else f'"{version}"'):
            return web.Response(status=412)
        self.versions[key] = (version or 0) + 1
        return web.Response(status=201)


@contextlib.asynccontextmanager
async def serving_stub() -> AsyncIterator[tuple[Stub, str]]:
    """A Stub served on a free loopback port, and its URL."""
    server = Stub()
    app = web.Application()
    app.router.add_route("*", "/v0/entity", server.handle)
    async with served(app) as url:
        yield server, url
