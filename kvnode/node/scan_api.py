"""The cluster-wide scan's HTTP form, ``GET /v0/scan?start=S[&end=E&limit=L&page=TOKEN]`` on any node: each
live key of the range once, with its newest version, merged from the members (kvnode.coordinator.scan), in
chunks as /v0/entities. /v0/entities stays this node's own records."""

from __future__ import annotations

from aiohttp import web

from kvnode.coordinator.scan import ScanUnavailable, merged, page_sources
from kvnode.node.params import bad_request, query_of, text
from kvnode.node.parts import PARTS
from kvnode.node.query import BadQuery, Query
from kvnode.replica.errors import ReplicaError
from kvnode.scheduling import Slice

__all__ = ["NEXT_PAGE_HEADER", "get_scan"]

NEXT_PAGE_HEADER = "X-Kvnode-Next-Page"
_SCAN_PARAMS = ("start", "end", "limit", "page")
_MAX_SCAN_LIMIT = 10_000  # records a page of /v0/scan holds at most (they are held until it is answered)


async def get_scan(request: web.Request) -> web.StreamResponse:
    """The cluster's live records with start <= key < end, each key once with its newest version, merged
    from the members (kvnode.coordinator.scan), one chunk ``key\\nvalue`` each as /v0/entities; with
    ``limit``, that many at most, and the NEXT_PAGE_HEADER names the ``page`` to ask for next (none after
    the last). 503 when too many members do not answer for every key to have an owner that does."""
    query = query_of(request, _SCAN_PARAMS)
    try:
        start, end, limit = _scan_params(query)
    except BadQuery as error:
        raise bad_request(str(error)) from None
    parts = request.app[PARTS]
    owning = parts.coordinator.owning
    records = merged(
        page_sources(parts.config.url, parts.storage, parts.peers, end),
        start,
        owning.owners,
        owning.replication,
        parts.clock.current(),
    )
    held: list[tuple[bytes, bytes]] = []
    share = Slice()  # a long scan starves nobody: merging a page of 10,000 records takes a while
    try:  # the first record (and with a limit, the page) before the answer: a refusal is still a 503
        async for record in records:
            held.append(record)
            if len(held) > (limit or 0):
                break
            await share.pause()
    except ScanUnavailable as error:
        return text(503, f"cannot scan every key: {error}")
    except ReplicaError as error:
        return text(503, f"a member failed during the scan: {error}")
    headers = {"Content-Type": "application/octet-stream"}
    if limit is not None and len(held) > limit:
        headers[NEXT_PAGE_HEADER] = held[limit - 1][0].hex() + "00"  # just after the page's last key
        del held[limit:]
    response = web.StreamResponse(headers=headers)
    response.enable_chunked_encoding()
    await response.prepare(request)
    for key, value in held:
        await response.write(key + b"\n" + value)  # a chunk a record; a write waits only for a full buffer
        await share.pause()
    if limit is None and held:  # no limit: the rest streams (a member failing now cuts the stream short)
        async for key, value in records:
            await response.write(key + b"\n" + value)
            await share.pause()
    await response.write_eof()
    return response


def _scan_params(query: Query) -> tuple[bytes, bytes | None, int | None]:
    """/v0/scan's start (``page``'s when given), end and limit."""
    start = query.utf8("start")
    end = query.utf8("end", allow_empty=True) if "end" in query else None
    limit_text = query.single("limit")
    limit = None
    if limit_text is not None:
        digits = limit_text.isascii() and limit_text.isdigit() and len(limit_text) <= 5
        limit = int(limit_text) if digits else 0
        if not 1 <= limit <= _MAX_SCAN_LIMIT:
            raise bad_request(
                f"query parameter 'limit' must be from 1 to {_MAX_SCAN_LIMIT}, not {limit_text!r}"
            )
    page = query.single("page")
    if page is not None:
        try:
            resume = bytes.fromhex(page)
        except ValueError:
            raise bad_request(f"query parameter 'page' is not a page token: {page[:40]!r}") from None
        if resume < start:
            raise bad_request("query parameter 'page' names a key before 'start'")
        start = resume
    return start, end, limit
