"""The records of a chunked scan answer (/v0/entities, /v0/scan): one HTTP chunk ``key\\nvalue`` each."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp

__all__ = ["records"]


async def records(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, bytes]]:
    """The (key, value) of each HTTP chunk ``key\\nvalue`` of a ``/v0/entities`` stream."""
    record = b""
    async for data, end_of_chunk in response.content.iter_chunks():
        record += data
        # aiohttp may also report the stream's closing zero-length chunk, depending on how bytes arrived.
        if end_of_chunk and record:
            key, _, value = record.partition(b"\n")
            yield key.decode("utf-8"), value
            record = b""
