"""Request bodies being read (kvnode.access.uploads): a graceful stop waits for a body still arriving, and
a body that takes longer than the timeout fails with TimeoutError. Served by aiohttp's test server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kvnode.access.uploads import Uploads


def echo_app(uploads: Uploads, reading: asyncio.Event) -> web.Application:
    """PUT / answers the body it read through ``uploads``, or 408 when the read timed out."""

    async def echo(request: web.Request) -> web.Response:
        reading.set()  # uploads.read runs up to its first wait before this handler yields
        try:
            return web.Response(body=await uploads.read(request))
        except TimeoutError:
            return web.Response(status=408, text="body too slow\n")

    app = web.Application()
    app.router.add_put("/", echo)
    return app


async def test_a_stop_waits_for_a_body_still_arriving() -> None:
    uploads, reading, rest = Uploads(timeout=60), asyncio.Event(), asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield b"first "
        await rest.wait()
        yield b"last"

    async with TestClient(TestServer(echo_app(uploads, reading))) as client:
        put = asyncio.create_task(client.put("/", data=body()))
        await reading.wait()
        stopped = asyncio.create_task(uploads.none_left())
        for _ in range(20):
            await asyncio.sleep(0)
        assert not stopped.done()
        rest.set()
        await asyncio.wait_for(stopped, 30)
        response = await put
        assert (response.status, await response.read()) == (200, b"first last")


async def test_a_whole_body_is_read_and_leaves_nothing_to_wait_for() -> None:
    uploads, reading = Uploads(timeout=60), asyncio.Event()
    async with TestClient(TestServer(echo_app(uploads, reading))) as client:
        response = await client.put("/", data=b"all at once")
        assert (response.status, await response.read()) == (200, b"all at once")
    await asyncio.wait_for(uploads.none_left(), 1)


async def test_a_body_slower_than_the_timeout_fails_and_is_no_longer_waited_for() -> None:
    uploads, reading, never = Uploads(timeout=0.05), asyncio.Event(), asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield b"first "
        await never.wait()
        yield b"never sent"

    async with TestClient(TestServer(echo_app(uploads, reading))) as client:
        put = asyncio.create_task(client.put("/", data=body()))
        response = await asyncio.wait_for(put, 30)
        assert (response.status, await response.text()) == (408, "body too slow\n")
        await asyncio.wait_for(uploads.none_left(), 1)
