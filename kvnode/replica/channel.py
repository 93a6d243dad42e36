"""The client end of one replica channel: an ``asyncio.Protocol`` that upgrades a TCP connection to a
WebSocket and parses frames inside ``data_received``. Parsing there costs a few µs a call, where aiohttp's
client WebSocket spent ~50 µs a call in tasks and queues on this machine (measured)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from kvnode.replica import websocket
from kvnode.replica.errors import ReplicaError, ReplicaProtocolError, ReplicaUnavailable
from kvnode.replica.websocket import WebSocketError

if TYPE_CHECKING:
    from kvnode.replica.peer import PeerReplica

__all__ = ["PEER_PATH", "ClientChannel"]

PEER_PATH = "/v0/internal/replica"
_MAX_HEAD = 16384  # bytes of upgrade answer headers


class ClientChannel(asyncio.Protocol):
    """One connection to a peer: upgrade handshake, then frames handed to the PeerReplica that owns it."""

    transport: asyncio.Transport

    def __init__(self, peer: PeerReplica, authority: str) -> None:
        self._peer = peer
        self._request, self._accept = websocket.handshake_request(authority, PEER_PATH)
        self._head = b""
        self._decoder: websocket.FrameDecoder | None = None
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport.write(self._request)

    def send(self, payload: bytes) -> None:
        self.transport.write(websocket.encode_frame(websocket.OP_BINARY, payload))

    def ping(self) -> None:
        self.transport.write(websocket.encode_frame(websocket.OP_PING, b""))

    def data_received(self, data: bytes) -> None:
        try:
            if self._decoder is None:
                data = self._upgrade(data)
                if self._decoder is None:
                    return
            messages = self._decoder.feed(data)
        except WebSocketError as error:
            self._fail(ReplicaProtocolError(f"{self._peer.url}: {error}"))
            return
        self._peer.heard_from(self)
        for opcode, payload in messages:
            if opcode == websocket.OP_BINARY:
                self._peer.received(self, payload)
            elif opcode == websocket.OP_PING:
                self.transport.write(websocket.encode_frame(websocket.OP_PONG, payload))
            elif opcode == websocket.OP_CLOSE:  # the peer is shutting down: expected, not a fault
                self._peer.drop(
                    self, ReplicaUnavailable(f"{self._peer.url} closed the replica channel"), logging.INFO
                )
                return
            elif opcode != websocket.OP_PONG:
                self._fail(ReplicaProtocolError(f"{self._peer.url}: unexpected WebSocket opcode {opcode}"))
                return

    def _upgrade(self, data: bytes) -> bytes:
        """Collect the handshake answer; what follows it is already frames."""
        self._head += data
        head, separator, rest = self._head.partition(b"\r\n\r\n")
        if not separator:
            if len(self._head) > _MAX_HEAD:
                raise websocket.HandshakeError("upgrade answer headers too long")
            return b""
        websocket.check_handshake(head, self._accept)
        self._decoder = websocket.FrameDecoder()
        if not self.upgraded.done():
            self.upgraded.set_result(None)
        return rest

    def _fail(self, error: ReplicaError) -> None:
        if not self.upgraded.done():
            self.upgraded.set_exception(WebSocketError(str(error)))
        self._peer.drop(self, error)

    def connection_lost(self, exc: Exception | None) -> None:
        error = ReplicaUnavailable(f"{self._peer.url}: connection lost{f': {exc}' if exc else ''}")
        if not self.upgraded.done():
            self.upgraded.set_exception(WebSocketError(str(error)))
        self._peer.drop(self, error)
