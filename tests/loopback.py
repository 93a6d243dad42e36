"""Any aiohttp app served on a free loopback port in the test's own event loop, for in-process tests that
need a real socket: a stand-in peer, a canned member, a flaky node."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free loopback port until the block ends: its URL. On leaving, aiohttp has waited for
    the handlers and whatever it logs after them."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
