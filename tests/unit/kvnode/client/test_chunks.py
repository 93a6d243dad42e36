"""kvnode.client.chunks: the (key, value) of each HTTP chunk of a scan answer, read from aiohttp's test
server, however the bytes of a chunk arrive."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kvnode.client.chunks import records

RECORDS = [
    ("plain", b"value"),
    ("empty", b""),
    ("lines", b"a value\nwith newlines\n"),
    ("large", bytes(range(256)) * 1024),  # 256 KiB: its chunk arrives in several reads
    ("k\u00e9y", b"utf-8 key"),
]


async def scan(request: web.Request) -> web.StreamResponse:
    """Each record as one chunk ``key\\nvalue``, as /v0/entities and /v0/scan send them."""
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    for key, value in RECORDS:
        await response.write(key.encode() + b"\n" + value)
    await response.write_eof()
    return response


async def test_each_chunk_is_one_record() -> None:
    app = web.Application()
    app.router.add_get("/v0/scan", scan)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/v0/scan")
        assert [record async for record in records(response)] == RECORDS
