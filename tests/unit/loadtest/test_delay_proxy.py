"""loadtest.delay_proxy: answers arrive late by the delay, in order, and close() ends open connections."""

from __future__ import annotations

import asyncio
import time

from kvnode.ops.ports import free_ports
from loadtest.delay_proxy import DelayProxy

DELAY = 0.15


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_answers_are_late_by_the_delay_and_in_order() -> None:
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    target = echo.sockets[0].getsockname()[:2]
    listen = ("127.0.0.1", free_ports(1)[0])
    proxy = DelayProxy(listen, target, DELAY)
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection(*listen)
        started = time.monotonic()
        writer.write(b"one,")
        await writer.drain()
        writer.write(b"two")
        received = b""
        while len(received) < len(b"one,two"):
            received += await asyncio.wait_for(reader.read(1024), 5)
        elapsed = time.monotonic() - started
        assert received == b"one,two"
        assert DELAY <= elapsed < DELAY + 1.0
        # close() ends the connection that is still open, and returns.
        await asyncio.wait_for(proxy.close(), 5)
        assert await asyncio.wait_for(reader.read(1024), 5) == b""
        writer.close()
    finally:
        await proxy.close()
        echo.close()
