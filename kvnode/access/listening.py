"""The node's listening ports: bound before anything else starts, and served by a site whose TLS handshake
counts against the header timeout.

A node binds its ports first (:func:`bind`), so one that cannot have its port says so before it has
claimed anything: a join on a port in use would otherwise take its place in the membership and then die,
leaving a member that never comes. A bound socket does not listen until the node serves (asyncio calls
``listen`` then), so until then a peer's connection is refused, as before, instead of waiting in a
backlog nobody accepts.

aiohttp's sites cannot be given asyncio's ``ssl_handshake_timeout`` (its default is 60 s), and a TLS
connection reaches aiohttp only once its handshake is done, so kvnode.access.connections's header timeout
never sees one that never sends its ClientHello. :class:`ListeningSite` serves a bound socket with the
handshake bounded by the header timeout: nginx's client_header_timeout covers its handshake as well.

Each TLS connection costs the heap more than a plain one: uvloop's read buffer (256 KiB, below the mmap
threshold kvnode.memory sets), OpenSSL's objects, and, for one closed before its handshake ended, aiohttp's
protocol objects in a reference cycle that only the garbage collector frees (aiohttp is never told such a
connection ended). Freed, that memory stayed in the heap: five floods of 2,000 connections that never
handshook took a node from 30 to 263 MiB, for good. So the site tells the settler (kvnode.memory) of each
TLS connection once its handshake timeout has passed, when it is handshaken or closed, and the settler
collects and trims after a flood, as after large values.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from aiohttp import web

from kvnode.config import node_url
from kvnode.memory import Settler

__all__ = ["Bound", "CannotListen", "ListeningSite", "bind"]

BACKLOG = 1024
# What a TLS connection leaves the settler to give back: uvloop's read buffer (SSL_READ_MAX_SIZE) alone.
TLS_CONNECTION_BYTES = 256 * 1024
_ASYNCIO_HANDSHAKE_TIMEOUT_S = 60.0


class CannotListen(Exception):
    """The port cannot be had (taken, or not allowed): the process's one-line reason."""


class Bound:
    """The sockets bound for one port (one per address its host resolves to), not yet listening."""

    def __init__(self, url: str, port: int) -> None:
        self.url = url
        self.port = port
        self.sockets: list[socket.socket] = []

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def bind(host: str, port: int, *, tls: bool, reuse_port: bool = False) -> Bound:
    """Bind ``port`` on every address of ``host``, as asyncio's create_server would; CannotListen (with
    nothing left bound) if one cannot be had. ``reuse_port``: shared with other processes (SO_REUSEPORT)."""
    url = node_url(host, port, tls)
    bound = Bound(url, port)
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(addresses):
            sock = socket.socket(family, kind, proto)
            bound.sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:  # as asyncio does: "::" does not take the IPv4 port too
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.setblocking(False)
    except OSError as error:
        bound.close()
        raise CannotListen(f"cannot listen on {url}: {error.strerror or error}") from None
    return bound


class ListeningSite(web.BaseSite):
    """An aiohttp site on one bound socket; with TLS, a connection whose handshake has not ended within
    ``handshake_timeout`` seconds is closed (None: asyncio's default, 60 s), and each connection is told
    to ``settler`` then (see the module's docstring)."""

    __slots__ = ("_handshake_timeout", "_settler", "_sock", "_url")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        handshake_timeout: float | None,
        settler: Settler | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=BACKLOG)
        self._sock = sock
        self._url = url
        self._handshake_timeout = handshake_timeout
        self._settler = settler

    @property
    def name(self) -> str:
        return self._url

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # the runner was set up: BaseSite checked
        tls = self._ssl_context is not None
        loop = asyncio.get_running_loop()
        settler = self._settler
        protocols: Callable[[], asyncio.BaseProtocol] = server
        if tls and settler is not None:
            handshake_s = self._handshake_timeout or _ASYNCIO_HANDSHAKE_TIMEOUT_S

            def accepted() -> asyncio.BaseProtocol:
                loop.call_later(handshake_s, settler.passed, TLS_CONNECTION_BYTES)
                return server()

            protocols = accepted
        self._server = await loop.create_server(
            protocols,
            sock=self._sock,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout if tls else None,
        )
