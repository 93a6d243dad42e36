"""The client-facing HTTP API (/v0/entity, /v0/entities, /v0/status): request parsing and validation,
then the coordinator.

Every rejection is a 4xx with a one-line plain-text reason, decided before anything is written; a query
parameter the method and path do not take is one (a misspelt ``ack`` must not pass for the default;
``ttl`` is a PUT's only). A version whose TTL has run out reads as absent, judged with the node's hybrid
clock.
/v0/entity requests pass admission control first (kvnode.access.admission) and are counted and timed for
/metrics, all in one wrapper; the other paths are not counted.
A PUT body that has not all arrived within ``--body-timeout-s`` is answered 408. A write that failed its
quorum is 504, or 507 when a replica's disk is full (kvnode.storage.keyspace). Every 200 and every write's
answer carries the version's ``ETag``; a write with ``If-Match`` or ``If-None-Match``, and a read with
``serial=1``, is a Paxos round instead (kvnode.node.conditional_api).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web
from aiohttp.typedefs import Handler

from kvnode.clocks.fence import ClockFenced
from kvnode.coordinator.coordinator import Coordinator
from kvnode.coordinator.fanout import QuorumFailed
from kvnode.coordinator.quorum import BadQuorum, Quorum
from kvnode.metrics import FixedBuckets
from kvnode.node.conditional_api import condition_of, conditional_write, serial_read
from kvnode.node.params import bad_request, query_of, text
from kvnode.node.parts import PARTS, NodeParts
from kvnode.node.query import BadQuery, Query
from kvnode.node.scan_api import get_scan
from kvnode.paxos.conditions import quoted_etag
from kvnode.paxos.proposer import Write
from kvnode.replica.readiness import NodeState
from kvnode.scheduling import Slice
from kvnode.storage.keyspace import StorageFull

__all__ = ["ENTITY_PATH", "add_routes", "is_ready"]

ENTITY_PATH = "/v0/entity"
_ENTITY_PARAMS = ("id", "ack", "from")
_GET_PARAMS = (*_ENTITY_PARAMS, "serial")
_PUT_PARAMS = (*_ENTITY_PARAMS, "ttl")
# The longest TTL, Cassandra's: 20 years in milliseconds.
_MAX_TTL_MS = 20 * 365 * 24 * 3600 * 1000
_ENTITIES_PARAMS = ("start", "end")
# What each entity handler is known to answer (500 aside): their /metrics series exist from the start.
_GET_STATUSES = (200, 400, 404, 503, 504)
_PUT_STATUSES = (201, 400, 408, 412, 413, 503, 504, 507)
_DELETE_STATUSES = (202, 400, 412, 503, 504, 507)


def add_routes(app: web.Application, parts: NodeParts) -> dict[tuple[str, str], Handler]:
    """The client API's routes; returns /v0/entity's handlers by (method, path), which a server without
    middleware calls without the router (kvnode.access.connections.DIRECT_ROUTES)."""
    entity = {
        "GET": _entity(parts, "get", get_entity, _GET_STATUSES),
        "PUT": _entity(parts, "put", put_entity, _PUT_STATUSES),
        "DELETE": _entity(parts, "delete", delete_entity, _DELETE_STATUSES),
    }
    app.router.add_get(ENTITY_PATH, entity["GET"], allow_head=False)
    app.router.add_put(ENTITY_PATH, entity["PUT"])
    app.router.add_delete(ENTITY_PATH, entity["DELETE"])
    app.router.add_get("/v0/entities", get_entities, allow_head=False)
    app.router.add_get("/v0/scan", get_scan, allow_head=False)
    app.router.add_get("/v0/status", get_status, allow_head=False)
    return {(method, ENTITY_PATH): handler for method, handler in entity.items()}


_EntityHandler = Callable[[NodeParts, web.Request], Awaitable[web.Response]]


def _entity(parts: NodeParts, op: str, handle: _EntityHandler, statuses: tuple[int, ...]) -> Handler:
    """An entity handler in its one wrapper: admission first (503 beyond a limit, kvnode.access.admission),
    and every answer, a refusal included, counted and timed by status for /metrics (kvnode.node.exporter). One
    wrapper, not one per concern: each coroutine layer costs the hot path a frame and a resumption."""
    admission = parts.admission
    by_status = parts.metrics.requests(op, statuses)

    async def entity(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        status = 500
        try:
            size = admission.admit(request)
            if not isinstance(size, int):  # a Response: isinstance against it is an ABC's check
                status = 503
                return size
            try:
                response = await handle(parts, request)
            finally:
                admission.leave(size)
            status = response.status
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            buckets = by_status.get(status)
            if buckets is None:
                buckets = by_status[status] = FixedBuckets()
            buckets.observe(time.perf_counter() - start)

    return entity


async def get_entity(parts: NodeParts, request: web.Request) -> web.Response:
    coordinator = parts.coordinator
    query, key = _query_and_key(request, _GET_PARAMS)
    if "serial" in query:
        return await serial_read(parts, query, key)
    quorum = _quorum(query, coordinator, read=True)
    try:
        record = await coordinator.get(key, quorum)
    except QuorumFailed as error:
        return text(504, str(error))
    # The newest version decides: an expired one reads as absent even where an older one is live. The
    # clock is read only for a version that expires (one that does not is absent only as a tombstone).
    if record is None or record.absent_at(parts.clock.current() if record.expires else 0):
        return text(404, "no such entity")
    return web.Response(
        body=record.value, content_type="application/octet-stream", headers={"ETag": quoted_etag(record)}
    )


async def put_entity(parts: NodeParts, request: web.Request) -> web.Response:
    coordinator = parts.coordinator
    query, key = _query_and_key(request, _PUT_PARAMS)
    condition = condition_of(request, query)
    quorum = None if condition is not None else _quorum(query, coordinator)
    ttl_ms = _ttl_ms(query)
    limit, length = parts.config.max_body_bytes, request.content_length  # aiohttp parses it at each read
    if length is not None and length > limit:
        return text(413, f"body of {length} bytes exceeds the limit of {limit} bytes")
    uploads = parts.uploads
    try:
        value = await uploads.read(request)
    except web.HTTPRequestEntityTooLarge:
        return text(413, f"body exceeds the limit of {limit} bytes")
    except TimeoutError:
        return text(408, f"body not received within {uploads.timeout:g} s")
    if quorum is None:
        assert condition is not None
        write = Write.put(value, 0 if ttl_ms is None else ttl_ms * 1000)
        return await conditional_write(parts, key, write, condition)
    try:
        record = await coordinator.put(key, value, quorum, ttl_ms)
    except (QuorumFailed, StorageFull) as error:
        return _write_failed(error)
    except ClockFenced as error:
        return text(503, str(error))
    return text(201, "created", etag=quoted_etag(record))


async def delete_entity(parts: NodeParts, request: web.Request) -> web.Response:
    coordinator = parts.coordinator
    query, key = _query_and_key(request, _ENTITY_PARAMS)
    condition = condition_of(request, query)
    if condition is not None:
        return await conditional_write(parts, key, Write.delete(), condition)
    try:
        record = await coordinator.delete(key, _quorum(query, coordinator))
    except (QuorumFailed, StorageFull) as error:
        return _write_failed(error)
    except ClockFenced as error:
        return text(503, str(error))
    return text(202, "accepted", etag=quoted_etag(record))


async def get_entities(request: web.Request) -> web.StreamResponse:
    """This node's live records with start <= key < end, one chunk ``key\\nvalue`` per record."""
    query = query_of(request, _ENTITIES_PARAMS)
    try:
        start = query.utf8("start")
        end = query.utf8("end", allow_empty=True) if "end" in query else None
    except BadQuery as error:
        raise bad_request(str(error)) from None
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    if end is None or start < end:
        parts = request.app[PARTS]
        records = parts.storage.scan_live(start, end, now=parts.clock.current())
        share = Slice()  # a long listing starves nobody
        for key, value in records:
            await response.write(key + b"\n" + value)
            await share.pause()
    await response.write_eof()
    return response


async def get_status(request: web.Request) -> web.Response:
    """Which process serves here: a launcher checks that the node answering is the one it started, and
    waits until its data is known to be whole or not (``data``: unknown, rebuilding, serving).

    ``?ready`` answers ``503`` with the same body unless the node :func:`is_ready`: a readiness check
    that sees only the status code (Kubernetes' probe, a load balancer's) then passes only a node whose
    reads count."""
    try:
        asked = query_of(request, ("ready",)).single("ready")
    except BadQuery as error:
        raise bad_request(str(error)) from None
    if asked not in (None, ""):
        raise bad_request(f"query parameter 'ready' takes no value, got {asked!r}: GET /v0/status?ready")
    parts = request.app[PARTS]
    config = parts.config
    data = parts.rebuild.node_state()
    # The cluster's identity among the membership: what a node joining proves in its handshakes.
    body = {"url": config.url, "pid": os.getpid(), **parts.membership.described(), "data": data.value}
    status = 503 if asked is not None and not is_ready(data, config.url, parts.membership.joining) else 200
    return web.Response(status=status, text=json.dumps(body) + "\n", content_type="application/json")


def is_ready(data: NodeState, url: str, joining: Collection[str]) -> bool:
    """Whether the node at ``url`` counts as a replica whose reads count: its data known whole (not
    unknown, not rebuilding), and not joining (it counts once it holds what it owns and has settled).

    >>> is_ready(NodeState.SERVING, "http://a:1", joining=())
    True
    >>> [is_ready(data, "http://a:1", joining=()) for data in (NodeState.REBUILDING, NodeState.UNKNOWN)]
    [False, False]
    >>> is_ready(NodeState.SERVING, "http://a:1", joining=("http://a:1",))
    False
    >>> is_ready(NodeState.SERVING, "http://a:1", joining=("http://b:1",))  # another member joins
    True
    """
    return data is NodeState.SERVING and url not in joining


def _query_and_key(request: web.Request, known: tuple[str, ...]) -> tuple[Query, bytes]:
    """The request's query, and its key."""
    query = query_of(request, known)
    try:
        return query, query.utf8("id")
    except BadQuery as error:
        raise bad_request(str(error)) from None


def _quorum(query: Query, coordinator: Coordinator, *, read: bool = False) -> Quorum:
    """The request's ack of from, or its consistency level by name (defaults: a majority of the N
    owners)."""
    try:
        return coordinator.quorum(query.single("ack"), query.single("from"), read=read)
    except (BadQuery, BadQuorum) as error:
        raise bad_request(str(error)) from None


def _ttl_ms(query: Query) -> int | None:
    """The PUT's ``ttl``: a whole number of milliseconds from 1 to _MAX_TTL_MS; None when absent."""
    try:
        given = query.single("ttl")
    except BadQuery as error:
        raise bad_request(str(error)) from None
    if given is None:
        return None
    # Digits only: int() would also take a sign, spaces and underscores.
    ttl = int(given) if given.isascii() and given.isdigit() and len(given) <= len(str(_MAX_TTL_MS)) else 0
    if not 1 <= ttl <= _MAX_TTL_MS:
        limits = f"a whole number of milliseconds from 1 to {_MAX_TTL_MS}"
        raise bad_request(f"query parameter 'ttl' must be {limits}, not {given!r}")
    return ttl


def _write_failed(error: QuorumFailed | StorageFull) -> web.Response:
    """504, or 507 Insufficient Storage when a replica failed for a full disk (it says which), or when
    this node could not persist its clock's floor to stamp the write (nothing was written)."""
    if isinstance(error, StorageFull):
        return text(507, f"cannot stamp the write: {error}")
    return text(507 if error.disk_full else 504, str(error))
