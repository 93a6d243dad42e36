"""Connections bounded in number and in time: the descriptor limit, the client-connection cap, the header
timeout, and the node's one hook into aiohttp's server (:class:`GuardedRunner`).

aiohttp has no header timeout and no connection cap, and answers a request its parser refuses with a
multi-line dump. GuardedRunner serves an app as web.AppRunner does, through a protocol (a subclass of
aiohttp's RequestHandler) that:

- closes a connection whose request headers have not all arrived ``header_timeout`` seconds after the
  request's first byte (after the connection opened, for its first request), answering 408 if part of
  them came: nginx's client_header_timeout. Idle keep-alive connections are closed by aiohttp's own
  keepalive_timeout;
- counts client connections: beyond ``max_connections`` a new connection is admitted provisionally, up
  to a reserve kept for peers (a peer is known only by its first request, the replica channel's handshake):
  a provisional connection whose first request is not the handshake is answered 503 and closed; beyond the
  reserve a connection is answered 503 at once. A connection that upgrades to the replica channel stops
  counting as a client's;
- answers a request the parser refuses with one plain-text line, logged as one rate-limited warning: a
  request line over aiohttp's limit is a 414 naming it and the longest key that fits, a header line over
  it a 431;
- logs a client that closed its connection while a handler wrote its answer (a backup that stops its
  other streams when one fails) as one line at INFO, not as aiohttp's ERROR with a traceback;
- calls the app's hot routes (DIRECT_ROUTES) itself, past the app's router and middleware, checking
  their client tokens itself (DIRECT_TOKENS) as the app's token check does for the other routes.

aiohttp's private names this relies on, all here (tests/unit/kvnode/access/test_connections.py checks
each, so an aiohttp upgrade that changes them fails there by name): ``AppRunner._make_server``
(overridden: the app's Server is rebuilt as ours), ``Server._kwargs`` (the protocol's arguments),
``RequestHandler._messages`` (requests parsed, not yet handled) and ``._request_in_progress`` (one being
handled, until its response is written): neither, and a connection waits for a request's headers.
"""

from __future__ import annotations

import asyncio
import logging
import re
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler

from kvnode.access.client_auth import ClientTokens, role_needed, token_refusal
from kvnode.figures import Figure, Figures
from kvnode.figures import Kind as FigureKind
from kvnode.replica.channel.client import PEER_PATH
from kvnode.replica.channel.handshake import CHALLENGE_PATH, RateLimitedLog

__all__ = [
    "CONNECTION_FIGURES",
    "DIRECT_ROUTES",
    "DIRECT_TOKENS",
    "ConnectionGuard",
    "GuardedRunner",
    "capacity",
    "raise_descriptor_limit",
]

log = logging.getLogger("kvnode")

# Descriptors a node needs besides its client connections: LevelDB keeps up to its max_open_files (1,000,
# its default) table files open per database, and a node has two (records, system); each peer takes a
# few (its channel both ways, a handshake in progress); the rest is the process's own (stdio, epoll,
# signals, the listening socket, /proc reads).
_LEVELDB_FILES = 2 * 1000
_PER_PEER = 4
_PROCESS = 64
# Connections admitted beyond the cap until their first request says whether they are a peer's.
_PEER_RESERVE_BASE = 16


class Kind(Enum):
    CLIENT = "client"
    PROVISIONAL = "provisional"  # beyond the cap: a peer's, or answered 503 at its first request
    PEER = "peer"  # upgraded to the replica channel


@dataclass(slots=True)
class ConnectionGuard:
    """The node's connection counts and bounds; /metrics reads the counts."""

    max_connections: int
    peer_reserve: int
    header_timeout: float
    clients: int = 0  # open connections not (yet) known to be a peer's, provisional ones included
    provisional: int = 0
    refused: int = 0  # connections answered 503 for the cap (at once, or at a provisional one's request)
    header_timeouts: int = 0  # connections closed because their request headers came too slowly

    def admit(self) -> Kind | None:
        """The kind a new connection is admitted as, counted; None: refuse it."""
        if self.clients - self.provisional < self.max_connections:
            kind = Kind.CLIENT
        elif self.provisional < self.peer_reserve:
            kind = Kind.PROVISIONAL
            self.provisional += 1
        else:
            self.refused += 1
            return None
        self.clients += 1
        return kind

    @property
    def refusal(self) -> str:
        """The one line a connection refused for the cap is answered with."""
        return f"too many connections ({self.max_connections} clients); retry"

    def release(self, kind: Kind) -> None:
        if kind is not Kind.PEER:
            self.clients -= 1
        if kind is Kind.PROVISIONAL:
            self.provisional -= 1


# A ConnectionGuard's figures (kvnode.figures).
CONNECTION_FIGURES = Figures("connections", (
    Figure("clients", FigureKind.GAUGE, "Open connections not known to be a peer's replica channel",
           "kvnode_client_connections"),
    Figure("refused", FigureKind.COUNTER, "Connections answered 503 and closed because --max-connections "
           "were open", "kvnode_connections_refused"),
    Figure("header_timeouts", FigureKind.COUNTER, "Connections closed because their request headers had not "
           "all arrived within --header-timeout-s", "kvnode_header_timeouts"),
))  # fmt: skip


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise this process's soft limit on open descriptors to the hard limit: (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def capacity(members: int, max_connections: int, header_timeout_s: int) -> ConnectionGuard:
    """The bounds for a node of ``members`` under the current descriptor limit: ``max_connections`` (0:
    what the limit leaves once storage, peers and the process have theirs, and at least half of it)."""
    descriptors = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    peers = members - 1
    reserve = _PEER_RESERVE_BASE + _PER_PEER * peers
    if not max_connections:
        others = _LEVELDB_FILES + _PER_PEER * peers + _PROCESS + reserve
        max_connections = max(descriptors - others, descriptors // 2)
    return ConnectionGuard(max_connections, reserve, header_timeout_s)


_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
)
_HEADERS_LATE = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
)


def _answer(template: bytes, line: str) -> bytes:
    body = (line + "\n").encode()
    return template % (len(body), body)


class _GuardedProtocol(RequestHandler):
    """One connection: counted, its request headers timed, a refused request answered in one line."""

    __slots__ = ("_guard", "_headers_timer", "_kind", "_malformed", "_partial")

    def __init__(self, manager: web.Server, guard: ConnectionGuard, malformed: RateLimitedLog, **kwargs: Any):
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._malformed = malformed
        self._kind: Kind | None = None  # None: refused
        self._headers_timer: asyncio.TimerHandle | None = None
        self._partial = False  # part of a request's headers has arrived

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._kind = self._guard.admit()
        if self._kind is None:
            cast(asyncio.Transport, transport).write(_answer(_REFUSAL, self._guard.refusal))
            transport.close()
            self._force_close = True  # aiohttp's data_received ignores whatever still arrives
            return  # aiohttp never learns of it: connection_lost below returns at once
        super().connection_made(transport)
        self._await_headers()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._kind is None:
            return
        self._guard.release(self._kind)
        self._kind = None
        self._stop_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        RequestHandler.data_received(self, data)  # the base's parser, without a super() per call
        # One check per request on the hot path: a request parsed or being answered (a body, the replica
        # channel's frames) needs no header timer. Only the first bytes of a request whose headers did not
        # come in one piece arm one: a timer armed and cancelled per request is a hot-path cost
        # (docs/benchmarks.md).
        if self._messages or self._request_in_progress:
            if self._headers_timer is not None:
                self._stop_timer()
                self._partial = False
        elif data:
            self._partial = True
            if self._headers_timer is None:
                self._await_headers()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, ConnectionError) and (self.transport is None or self.transport.is_closing()):
            # The client went away while its answer was written: nothing to answer, no fault of the node.
            log.info(
                "%s %s: the client closed the connection during the answer", request.method, request.path
            )
            gone = web.Response(status=status)
            gone.force_close()
            return gone
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # The parser refused the request (a raw non-ASCII byte in the request line, say): the client's
        # fault, so no traceback, and one warning line stands for a flood of them.
        if isinstance(exc, LineTooLong):
            status, line = _too_long(exc)
        else:
            reason = (str(exc.message).strip().splitlines() or ["malformed request"])[0].rstrip(":")
            line = f"malformed request: {reason}"
        remote = request.remote
        self._malformed.warning("answered %d to a request from %s: %s", status, remote, line)
        response = web.Response(status=status, text=f"{line}\n")
        response.force_close()
        return response

    def admits(self, path: str) -> bool:
        """Whether a request for ``path`` may go on: a provisional connection may only shake hands."""
        if path == PEER_PATH and self._kind is not None and self._kind is not Kind.PEER:
            self._guard.release(self._kind)
            self._kind = Kind.PEER
        return self._kind is not Kind.PROVISIONAL or path == CHALLENGE_PATH

    def _await_headers(self) -> None:
        loop = asyncio.get_running_loop()
        self._headers_timer = loop.call_later(self._guard.header_timeout, self._headers_late)

    def _stop_timer(self) -> None:
        if self._headers_timer is not None:
            self._headers_timer.cancel()
            self._headers_timer = None

    def _headers_late(self) -> None:
        self._headers_timer = None
        if self._messages or self._request_in_progress or self.transport is None:
            return
        self._guard.header_timeouts += 1
        if self._partial:
            line = f"request headers not received within {self._guard.header_timeout:g} s"
            self.transport.write(_answer(_HEADERS_LATE, line))
        self.force_close()


# What a request line holds besides its key, at most: the method, the path, the other parameters
# (ack, from, ttl), the HTTP version. A key this much shorter than the line's limit always fits.
_AROUND_A_KEY = 190
# How the parser quotes a refused request line: aiohttp's C parser its URL, its Python parser the whole
# line (method first). A refused header line starts with a name, which holds no "/".
_REQUEST_LINE = re.compile(rb"(?:[A-Z]+ )?/")


def _too_long(refused: LineTooLong) -> tuple[int, str]:
    """The status and line that answer a request line or a header line over aiohttp's limit."""
    quoted, limit = refused.args[0], refused.args[1]
    if isinstance(quoted, bytes | bytearray) and _REQUEST_LINE.match(quoted):
        return 414, (
            f"request line too long: it is at most {limit} bytes, and a key of up to "
            f"{int(limit) - _AROUND_A_KEY} bytes percent-encoded always fits (a byte other than "
            "A-Z a-z 0-9 - . _ ~ takes 3)"
        )
    return 431, f"request header too long: a header line is at most {limit} bytes"


_AppHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

DIRECT_ROUTES = web.AppKey("direct_routes", dict[tuple[str, str], Handler])
"""An app's hot routes by (method, path), which the server calls itself, past the app's router and
middleware: that resolution, with its match info and the loop lookups around it, was 3 % of a
coordinator's samples, and a middleware about 45 Python calls a request (docs/profiling.md, ``python -m
profiling counts``). Only for an app whose one middleware, if any, is the client token check, which
DIRECT_TOKENS has the gate make; and for a request without ``Expect`` (whose answer aiohttp's router
gives): anything else goes through the app as usual."""

DIRECT_TOKENS = web.AppKey("direct_tokens", ClientTokens)
"""The client tokens of an app with a token check: the gate answers a hot route's request without a
token its role needs as the check would (kvnode.access.client_auth.token_refusal)."""


class _GuardedServer(web.Server):
    """The app's Server, its connections made by _GuardedProtocol."""

    def __init__(
        self,
        app_server: web.Server,
        guard: ConnectionGuard,
        direct: dict[tuple[str, str], Handler],
        tokens: ClientTokens | None,
    ) -> None:
        self._protocol_kwargs = app_server._kwargs  # aiohttp private: the protocol's keyword arguments
        super().__init__(
            self._gated(app_server.request_handler, guard, direct, tokens),
            request_factory=app_server.request_factory,
            handler_cancellation=app_server.handler_cancellation,
            **self._protocol_kwargs,
        )
        self._guard = guard
        self._malformed = RateLimitedLog(log)

    @staticmethod
    def _gated(
        handler: _AppHandler,
        guard: ConnectionGuard,
        direct: dict[tuple[str, str], Handler],
        tokens: ClientTokens | None,
    ) -> _AppHandler:
        client = Kind.CLIENT
        needed = {route: role_needed(*route, metrics_open=False) for route in direct}  # never /metrics

        def gated(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
            # Not a coroutine: aiohttp awaits the hot route's own, so the gate adds no coroutine layer to a
            # request (each one a frame made, and passed again at every resumption of the handler).
            protocol = request.protocol
            assert isinstance(protocol, _GuardedProtocol)
            # The target as the request line sent it, up to its query: the hot routes' paths need no
            # decoding, and a target that does (or is absolute) takes the router's way, below.
            method, path = request.method, request.raw_path.partition("?")[0]
            route = direct.get((method, path))
            # Nearly every request: a hot route on a client's connection, which the gate would admit as it
            # is (it is neither the handshake nor the channel), so one check and past the router.
            if route is not None and protocol._kind is client and hdrs.EXPECT not in request.headers:
                if tokens is not None:
                    authorization = request.headers.get(hdrs.AUTHORIZATION)
                    refusal = token_refusal(tokens, needed[method, path], method, path, authorization)
                    if refusal is not None:
                        return _answered(refusal)
                return route(cast(web.Request, request))  # the app's request factory makes Requests
            return admitted(request, protocol)

        async def admitted(request: web.BaseRequest, protocol: _GuardedProtocol) -> web.StreamResponse:
            path = request.path
            if not protocol.admits(path):
                guard.refused += 1
                refusal = web.Response(
                    status=503,
                    text=guard.refusal + "\n",
                    headers={"Retry-After": "1"},
                )
                refusal.force_close()
                return refusal
            response = await handler(request)
            if path == PEER_PATH:
                # No longer counted, the connection ends with its channel, or with the refused handshake.
                response.force_close()
            return response

        return gated

    def __call__(self) -> RequestHandler:
        return _GuardedProtocol(
            self, self._guard, self._malformed, loop=asyncio.get_running_loop(), **self._protocol_kwargs
        )


class GuardedRunner(web.AppRunner):
    """web.AppRunner whose connections the guard bounds; ``idle_timeout`` closes idle keep-alive ones."""

    def __init__(self, app: web.Application, guard: ConnectionGuard, idle_timeout: float, **kwargs: Any):
        super().__init__(app, keepalive_timeout=idle_timeout, **kwargs)
        self._guard = guard

    async def _make_server(self) -> web.Server:  # aiohttp private: how a runner makes its Server
        direct, tokens = self.app.get(DIRECT_ROUTES, {}), self.app.get(DIRECT_TOKENS)
        return _GuardedServer(await super()._make_server(), self._guard, direct, tokens)


async def _answered(response: web.StreamResponse) -> web.StreamResponse:
    return response
