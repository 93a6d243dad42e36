"""Request bodies being read: counted, so a graceful stop can wait for them, and bounded in time."""

from __future__ import annotations

import asyncio

from aiohttp import web

__all__ = ["Uploads"]


class Uploads:
    """Counts request bodies being read, so a graceful stop can wait for them before aiohttp stops
    reading its connections; a body that takes longer than ``timeout`` seconds raises TimeoutError."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._reading = 0
        self._none = asyncio.Event()
        self._none.set()

    async def read(self, request: web.Request) -> bytes:
        if request.content.is_eof():  # the whole body came with the headers: nothing to wait for
            return await request.read()
        self._reading += 1
        self._none.clear()
        try:
            async with asyncio.timeout(self.timeout):
                return await request.read()
        finally:
            self._reading -= 1
            if not self._reading:
                self._none.set()

    async def none_left(self) -> None:
        await self._none.wait()
