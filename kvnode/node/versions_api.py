"""A node's versions, raw, for a backup and its restore (``python -m kvnode admin backup|restore``,
kvnode.ops.backup); both need the admin role when client tokens are on.

``GET /v0/versions[?start=S&end=E]`` streams every version this node holds with S <= key < E (from the
first key, to the last, when not given), in key order, tombstones and expired versions included, as
frames (kvnode.storage.frames) ending with the end frame. It reads the keyspace in chunks, each from an
iterator of its own (Storage.read_chunk), so neither the store nor a snapshot of it is held while a slow
reader takes the stream. A version whose stored bytes are corrupt is left out and logged.

``POST /v0/versions[?check=live]``, a body of frames, writes each version with its own timestamp to its
key's owners (Coordinator.write_version: each owner keeps the newer version, nothing is stamped again),
through the clock fence. With ``check=live`` a version is written only where its key still has a version
in this cluster, read from every owner first, that is not newer (last-write-wins decides); a key no owner
holds is left alone. The answer counts each version's outcome as JSON: ``written``, ``kept`` (the cluster
holds a newer version), ``absent`` (check=live: no owner holds the key), ``failed`` (not every owner
answered, in three tries; ``failure`` is the first reason). The body is bounded (413 above): the whole
of it is read and checked before anything is written, so a bad body (400, one line) writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from aiohttp import web

from kvnode.clocks.fence import ClockFenced
from kvnode.coordinator.coordinator import Coordinator
from kvnode.coordinator.fanout import QuorumFailed
from kvnode.node.params import bad_request, query_of, text
from kvnode.node.parts import PARTS
from kvnode.node.query import BadQuery
from kvnode.scheduling import Slice
from kvnode.storage.frames import END, MAX_KEY_BYTES, BadFrames, FrameParser, encode_frame
from kvnode.storage.records import MAX_HEADER_BYTES, CorruptRecord, Record, check, decode

__all__ = ["VERSIONS_PATH", "add_routes"]

log = logging.getLogger(__name__)

VERSIONS_PATH = "/v0/versions"
_CHUNK = 256  # versions read from one LevelDB iterator and sent in one write
_CONCURRENT = 64  # versions of a restore body written at once (each one call to each owner)
_OUTCOMES = ("written", "kept", "absent", "failed")
_BATCH_BYTES = 1024 * 1024  # what admin restore sends at a time, about (kvnode.ops.restore)
_ATTEMPTS = 3  # for a version whose owners did not all answer
_RETRY_S = 0.5  # times the attempt number, before the next attempt


def add_routes(app: web.Application) -> None:
    app.router.add_get(VERSIONS_PATH, get_versions, allow_head=False)
    app.router.add_post(VERSIONS_PATH, post_versions)


async def get_versions(request: web.Request) -> web.StreamResponse:
    query = query_of(request, ("start", "end"))
    try:
        start = query.utf8("start", allow_empty=True) if "start" in query else b""
        end = query.utf8("end", allow_empty=True) if "end" in query else None
    except BadQuery as error:
        raise bad_request(str(error)) from None
    storage = request.app[PARTS].storage
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    cursor: bytes | None = start
    share = Slice()
    while cursor is not None:
        chunk = storage.read_chunk(cursor, _CHUNK)
        cursor = chunk[-1][0] + b"\x00" if len(chunk) == _CHUNK else None  # the next key after the last
        frames = []
        for key, raw in chunk:
            if end is not None and key >= end:
                cursor = None
                break
            try:
                frames.append(encode_frame(key, check(raw)))
            except CorruptRecord as error:
                log.warning("the versions stream leaves out the corrupt record for key %r: %s", key, error)
        await response.write(b"".join(frames))  # waits while the reader is behind
        await share.pause()  # a fast reader's writes do not wait: yield to requests every few ms
    await response.write(END)
    await response.write_eof()
    return response


async def post_versions(request: web.Request) -> web.Response:
    try:
        mode = query_of(request, ("check",)).single("check")
    except BadQuery as error:
        raise bad_request(str(error)) from None
    if mode not in (None, "live"):
        return text(400, f"query parameter 'check' takes only 'live', not {mode!r}")
    parts = request.app[PARTS]
    max_record = parts.config.max_body_bytes + MAX_HEADER_BYTES
    limit = _BATCH_BYTES + MAX_KEY_BYTES + max_record  # a batch, and one frame of the largest record past it
    if request.content_length is not None and request.content_length > limit:
        return text(413, f"body of {request.content_length} bytes exceeds the limit of {limit} bytes")
    parser = FrameParser(max_record)
    frames: list[tuple[bytes, bytes]] = []
    received = 0
    try:
        async for data in request.content.iter_any():
            received += len(data)
            if received > limit:
                return text(413, f"body exceeds the limit of {limit} bytes")
            frames += parser.feed(data)
        parser.finish()
    except BadFrames as error:
        return text(400, f"the body is not frames of versions: {error}")
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    for first in range(0, len(frames), _CONCURRENT):
        batch = frames[first : first + _CONCURRENT]
        answers = await asyncio.gather(
            *(
                _restore(parts.coordinator, key, raw, live=mode == "live", failures=failures)
                for key, raw in batch
            )
        )
        outcomes.update(answers)
    body: dict[str, object] = {outcome: outcomes[outcome] for outcome in _OUTCOMES}
    body["failure"] = failures[0] if failures else ""
    return web.json_response(body)


async def _restore(
    coordinator: Coordinator, key: bytes, raw: bytes, *, live: bool, failures: list[str]
) -> str:
    """Write one version (see the module's text), tried again when not every owner answered (a loaded
    peer's stall passes); its outcome."""
    record = decode(raw)
    attempt = 1
    while True:
        try:
            return await _restore_once(coordinator, key, record, live=live)
        except QuorumFailed as error:
            if attempt == _ATTEMPTS:
                failures.append(f"key {key[:60]!r}: {error}")
                return "failed"
        except ClockFenced as error:
            failures.append(f"key {key[:60]!r}: {error}")
            return "failed"
        await asyncio.sleep(_RETRY_S * attempt)
        attempt += 1


async def _restore_once(coordinator: Coordinator, key: bytes, record: Record, *, live: bool) -> str:
    if live:
        held = await coordinator.get(key, coordinator.owners_quorum(record))
        if held is None:
            return "absent"
        if held > record:
            return "kept"
    return "written" if await coordinator.write_version(key, record) else "kept"
