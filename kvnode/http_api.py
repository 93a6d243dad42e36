"""The client-facing HTTP API (see CONTRACT.md): request parsing and validation, then the coordinator.

Every rejection is a 4xx with a one-line plain-text reason, decided before anything is written.
/v0/entity requests pass admission control first (kvnode.admission); the other paths are not counted.
A PUT body that has not all arrived within ``--body-timeout-s`` is answered 408.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from kvnode.admission import Admission
from kvnode.clock import HybridClock
from kvnode.config import NodeConfig
from kvnode.coordinator import Coordinator
from kvnode.fanout import QuorumFailed
from kvnode.metrics import LoopLagMonitor
from kvnode.observe import NodeMetrics, cluster_view
from kvnode.quorum import BadQuorum, Quorum
from kvnode.replica.auth import CHALLENGE_PATH
from kvnode.replica.channel import PEER_PATH
from kvnode.replica.hints import HintStore
from kvnode.replica.peer import PeerReplica
from kvnode.replica.server import PeerGate, answer_challenge, serve_peer
from kvnode.storage import Storage

__all__ = [
    "ADMISSION",
    "CLOCK",
    "CONFIG",
    "COORDINATOR",
    "HINTS",
    "LOOP_LAG",
    "METRICS",
    "PEERS",
    "PEER_GATE",
    "PEER_SOCKETS",
    "STORAGE",
    "UPLOADS",
    "Uploads",
    "add_routes",
]

CONFIG = web.AppKey("config", NodeConfig)
STORAGE = web.AppKey("storage", Storage)
CLOCK = web.AppKey("clock", HybridClock)
HINTS = web.AppKey("hints", HintStore)
COORDINATOR = web.AppKey("coordinator", Coordinator)
PEERS = web.AppKey("peers", list[PeerReplica])
PEER_SOCKETS = web.AppKey("peer_sockets", set[web.WebSocketResponse])
LOOP_LAG = web.AppKey("loop_lag", LoopLagMonitor)
METRICS = web.AppKey("metrics", NodeMetrics)
PEER_GATE = web.AppKey("peer_gate", PeerGate)
ADMISSION = web.AppKey("admission", Admission)


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


UPLOADS = web.AppKey("uploads", Uploads)

_SCAN_YIELD_EVERY = 256  # records streamed between yields to the loop, so a long scan starves nobody


def add_routes(app: web.Application) -> None:
    metrics, admitted = app[METRICS], app[ADMISSION].admitted
    app.router.add_get("/v0/entity", metrics.timed("get", admitted(get_entity)), allow_head=False)
    app.router.add_put("/v0/entity", metrics.timed("put", admitted(put_entity)))
    app.router.add_delete("/v0/entity", metrics.timed("delete", admitted(delete_entity)))
    app.router.add_get("/v0/entities", get_entities, allow_head=False)
    app.router.add_get("/v0/status", get_status, allow_head=False)
    app.router.add_get("/v0/stats", get_stats, allow_head=False)
    app.router.add_get("/v0/cluster", get_cluster, allow_head=False)
    app.router.add_get("/metrics", make_aiohttp_handler(metrics.registry), allow_head=False)
    app.router.add_get(PEER_PATH, replica_channel, allow_head=False)
    app.router.add_get(CHALLENGE_PATH, replica_challenge, allow_head=False)


async def get_entity(request: web.Request) -> web.Response:
    key, quorum = _entity_params(request)
    try:
        record = await request.app[COORDINATOR].get(key, quorum)
    except QuorumFailed as error:
        return _text(504, str(error))
    if record is None or record.tombstone:
        return _text(404, "no such entity")
    return web.Response(body=record.value, content_type="application/octet-stream")


async def put_entity(request: web.Request) -> web.Response:
    key, quorum = _entity_params(request)
    limit = request.app[CONFIG].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return _text(413, f"body of {request.content_length} bytes exceeds the limit of {limit} bytes")
    uploads = request.app[UPLOADS]
    try:
        value = await uploads.read(request)
    except web.HTTPRequestEntityTooLarge:
        return _text(413, f"body exceeds the limit of {limit} bytes")
    except TimeoutError:
        return _text(408, f"body not received within {uploads.timeout:g} s")
    try:
        await request.app[COORDINATOR].put(key, value, quorum)
    except QuorumFailed as error:
        return _text(504, str(error))
    return _text(201, "created")


async def delete_entity(request: web.Request) -> web.Response:
    key, quorum = _entity_params(request)
    try:
        await request.app[COORDINATOR].delete(key, quorum)
    except QuorumFailed as error:
        return _text(504, str(error))
    return _text(202, "accepted")


async def get_entities(request: web.Request) -> web.StreamResponse:
    """This node's live records with start <= key < end, one chunk ``key\\nvalue`` per record."""
    start = _utf8(request, "start")
    end_text = _single(request, "end")
    end = None if end_text is None else _utf8(request, "end", allow_empty=True)
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    if end is None or start < end:
        for sent, (key, value) in enumerate(request.app[STORAGE].scan_live(start, end), 1):
            await response.write(key + b"\n" + value)
            if sent % _SCAN_YIELD_EVERY == 0:
                await asyncio.sleep(0)
    await response.write_eof()
    return response


async def get_status(request: web.Request) -> web.Response:
    """Which process serves here: a launcher checks that the node answering is the one it started."""
    config = request.app[CONFIG]
    body = {"url": config.url, "pid": os.getpid(), "cluster": list(config.members)}
    return web.Response(text=json.dumps(body) + "\n", content_type="application/json")


async def get_stats(request: web.Request) -> web.Response:
    """Node health for people and tools: the event loop's lag and each peer channel's state.

    ``?reset=1`` starts a new measurement window after answering (the profiler uses it per run).
    """
    app = request.app
    lag, clock, hints, stats = app[LOOP_LAG], app[CLOCK], app[HINTS], app[COORDINATOR].stats
    body = {
        "node": app[CONFIG].url,
        "fanout": app[CONFIG].fanout,
        "cluster": list(app[COORDINATOR].placement.nodes),
        "loop_lag_ms": {"samples": lag.histogram.count, **lag.histogram.summary_ms()},
        "peers": {peer.url: peer.state for peer in app[PEERS]},
        "clock": {"lead_ms": clock.lead_us / 1000, "ignored_ahead": clock.ignored},
        "hints": {
            "pending": hints.pending_by_target(),
            "kept": dict(hints.kept),
            "delivered": dict(hints.delivered),
            "dropped": dict(hints.dropped),
        },
        "requests": {"inflight": app[ADMISSION].inflight, "shed": app[ADMISSION].shed},
        "coordinator": {
            "rewrites": stats.rewrites,
            "read_repairs": stats.read_repairs,
            "skew_refusals": stats.skew_refusals,
        },
    }
    if request.query.get("reset") == "1":
        lag.reset()
    return web.Response(text=json.dumps(body, indent=2) + "\n", content_type="application/json")


async def get_cluster(request: web.Request) -> web.Response:
    """This node's view of its cluster (``python -m kvnode admin`` reads it): see kvnode.observe."""
    app = request.app
    config, peers = app[CONFIG], app[PEERS]
    view = await cluster_view(config.url, config.members, peers, app[HINTS], config.timeout)
    return web.Response(text=json.dumps(view, indent=2) + "\n", content_type="application/json")


async def replica_channel(request: web.Request) -> web.StreamResponse:
    app = request.app
    return await serve_peer(request, app[PEER_GATE], app[STORAGE], app[CLOCK], app[PEER_SOCKETS])


async def replica_challenge(request: web.Request) -> web.Response:
    return answer_challenge(request.app[PEER_GATE])


def _entity_params(request: web.Request) -> tuple[bytes, Quorum]:
    key = _utf8(request, "id")
    ack, from_ = _single(request, "ack"), _single(request, "from")
    try:
        quorum = Quorum.parse(ack, from_, request.app[COORDINATOR].cluster_size)
    except BadQuorum as error:
        raise _bad_request(str(error)) from None
    return key, quorum


def _single(request: web.Request, name: str) -> str | None:
    """The query parameter's one value (None if absent); 400 if it is given more than once."""
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise _bad_request(f"query parameter {name!r} is given {len(values)} times; give it once")
    return values[0] if values else None


def _utf8(request: web.Request, name: str, *, allow_empty: bool = False) -> bytes:
    text = _single(request, name)
    if text is None or (not text and not allow_empty):
        raise _bad_request(f"query parameter {name!r} is required and must not be empty")
    if "\ufffd" in text and not _raw_is_utf8(request, name):
        # yarl decodes a bad escape such as %FF to U+FFFD, which would give distinct ids one key.
        raise _bad_request(f"query parameter {name!r} is not valid UTF-8 once percent-decoded")
    return text.encode("utf-8")


def _raw_is_utf8(request: web.Request, name: str) -> bool:
    """Whether every value of ``name`` in the raw query string percent-decodes to valid UTF-8."""
    pairs = urllib.parse.parse_qsl(
        request.rel_url.raw_query_string, keep_blank_values=True, encoding="latin-1"
    )
    try:
        for raw_name, raw_value in pairs:
            if raw_name == name:
                raw_value.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text(status: int, reason: str) -> web.Response:
    return web.Response(status=status, text=reason + "\n")


def _bad_request(reason: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=reason + "\n")
