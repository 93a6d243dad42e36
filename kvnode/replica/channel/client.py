"""The client end of one replica channel: an ``asyncio.Protocol`` that upgrades a TCP connection to a
WebSocket and parses frames inside ``data_received``, with no task or queue per call, which aiohttp's client
WebSocket needs (docs/replica-channel.md).

With a cluster secret, the connection first asks for a challenge and proves itself in the upgrade request, and
the server's 101 must prove itself in turn (kvnode.replica.channel.handshake); with or without a secret, each
end introduces itself, and the server's introduction goes to
:class:`~kvnode.replica.channel.identities.Identities` once the upgrade is accepted. Each end's introduction
says the protocol versions it speaks, and the channel speaks the highest both do
(kvnode.replica.channel.protocol): the server refuses the upgrade when they share none, and so does this end,
should a server that says no range (version 1 only) be too old for it; a channel without identities says none,
and speaks 1. The transport's write buffer is respected: while it is over its high-water mark the calls wait
in the outbox (kvnode.replica.outbox).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, cast

from kvnode.replica.channel import websocket
from kvnode.replica.channel.handshake import (
    CHALLENGE_PATH,
    CLIENT_HEADER,
    SECRET_ADVICE,
    ClusterAuth,
    ExpectedProof,
    Introduction,
    server_proof_ok,
)
from kvnode.replica.channel.identities import Identities
from kvnode.replica.channel.protocol import LEGACY, negotiate
from kvnode.replica.channel.websocket import HandshakeError, WebSocketError
from kvnode.replica.errors import ReplicaError, ReplicaProtocolError, ReplicaUnavailable

__all__ = ["PEER_PATH", "ChannelListener", "ClientChannel", "HandshakeRefused"]

PEER_PATH = "/v0/internal/replica"
_MAX_HEAD = 16384  # bytes of an answer's headers (the challenge's or the upgrade's)
_MAX_NONCE = 128  # bytes of a challenge's body
_MAX_REASON = 300  # characters of a refusal's body quoted in the error


class HandshakeRefused(HandshakeError):
    """The peer refused this node's handshake, or failed to prove itself; ``cause`` says what it was
    about: "secret" (one side lacks it, or they differ), "membership", "protocol" (no protocol version in
    common), or "handshake" (anything else)."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class ChannelListener(Protocol):
    """What a channel tells the one who owns it (the peer replica); each call names the channel, so a
    listener can ignore one it has already given up."""

    def heard_from(self, channel: ClientChannel) -> None:
        """Bytes arrived: the peer is alive (replies and pongs alike)."""

    def received(self, channel: ClientChannel, frame: bytes) -> None:
        """A binary frame of replies arrived."""

    def ponged(self, channel: ClientChannel, payload: bytes) -> None:
        """A pong with a payload arrived: a clock ping's answer (kvnode.replica.clock_probe)."""

    def writable(self, channel: ClientChannel) -> None:
        """The transport's write buffer drained below its low-water mark."""

    def drop(self, channel: ClientChannel, error: ReplicaError, level: int = logging.WARNING) -> None:
        """The channel failed or was closed: give it up with ``error``."""


class ClientChannel(asyncio.Protocol):
    """One connection to the peer at ``url``: challenge and upgrade, then frames handed to its listener."""

    transport: asyncio.Transport

    def __init__(
        self,
        listener: ChannelListener,
        url: str,
        authority: str,
        auth: ClusterAuth | None,
        max_frame: int,
        identities: Identities | None = None,
    ) -> None:
        self._listener = listener
        self._url = url
        self._authority = authority
        self._auth = auth
        self._max_frame = max_frame
        self._identities = identities
        self._introduction = Introduction() if identities is None else identities.introduce(url)
        self._protocols = self._introduction.protocols or LEGACY
        self.protocol = 0  # the version the channel speaks, once upgraded
        self._accept = b""
        self._server_proof: ExpectedProof | None = None  # what the 101 must carry, once challenged
        self._head = b""
        self._decoder: websocket.FrameDecoder | None = None
        self.paused = False  # the transport's write buffer is over its high-water mark
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        if self._auth is None:
            identities = self._identities
            self._send_upgrade(
                {}
                if identities is None
                else {CLIENT_HEADER: identities.own_url, **self._introduction.headers()}
            )
        else:
            self.transport.write(f"GET {CHALLENGE_PATH} HTTP/1.1\r\nHost: {self._authority}\r\n\r\n".encode())

    def _send_upgrade(self, headers: dict[str, str]) -> None:
        request, self._accept = websocket.handshake_request(self._authority, PEER_PATH, headers)
        self.transport.write(request)

    def send(self, payload: bytes) -> None:
        self.transport.write(websocket.encode_frame(websocket.OP_BINARY, payload))

    def ping(self, payload: bytes = b"") -> None:
        self.transport.write(websocket.encode_frame(websocket.OP_PING, payload))

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._listener.writable(self)

    def data_received(self, data: bytes) -> None:
        try:
            if self._decoder is None:
                data = self._handshake(data)
            decoder = self._decoder  # read again: the handshake sets it (mypyc trusts a narrowed None)
            if decoder is None:
                return
            messages = decoder.feed(data)
        except WebSocketError as error:
            self._fail(ReplicaProtocolError(f"{self._url}: {error}"), error)
            return
        self._listener.heard_from(self)
        for opcode, payload in messages:
            if opcode == websocket.OP_BINARY:
                self._listener.received(self, payload)
            elif opcode == websocket.OP_PING:
                self.transport.write(websocket.encode_frame(websocket.OP_PONG, payload))
            elif opcode == websocket.OP_CLOSE:  # the peer is shutting down: expected, not a fault
                self._listener.drop(
                    self, ReplicaUnavailable(f"{self._url} closed the replica channel"), logging.INFO
                )
                return
            elif opcode == websocket.OP_PONG:
                if payload:
                    self._listener.ponged(self, payload)
            else:
                self._fail(ReplicaProtocolError(f"{self._url}: unexpected WebSocket opcode {opcode}"))
                return

    def _handshake(self, data: bytes) -> bytes:
        """Collect the challenge's answer (with a secret), then the upgrade's; what follows the upgrade
        answer is already frames."""
        self._head += data
        head, separator, rest = self._head.partition(b"\r\n\r\n")
        if not separator:
            if len(self._head) > _MAX_HEAD:
                raise HandshakeError("answer headers too long")
            return b""
        if self._auth is not None and not self._accept:
            return self._answer_challenge(head, rest)
        status_line, _ = websocket.parse_head(head)
        if status_line.split(" ", 2)[1:2] == ["403"]:
            raise self._upgrade_refused(status_line, rest)
        headers = websocket.check_handshake(head, self._accept)
        if self._auth is not None and not (
            self._server_proof is not None and server_proof_ok(headers, self._server_proof)
        ):
            raise HandshakeRefused(
                f"{self._url} did not prove it holds this node's cluster secret: it holds a different one; "
                + SECRET_ADVICE,
                "secret",
            )
        theirs = Introduction.of(headers)
        version = negotiate(self._protocols, theirs.protocols or LEGACY)
        if version is None:
            raise HandshakeRefused(
                f"no protocol version in common: this node speaks {self._protocols}, {self._url} "
                f"{theirs.protocols or LEGACY}; upgrade one node at a time",
                "protocol",
            )
        self.protocol = version
        if self._identities is not None:
            self._identities.met(self._url, theirs)
        self._decoder = websocket.FrameDecoder(self._max_frame)
        if not self.upgraded.done():
            self.upgraded.set_result(None)
        return rest

    def _answer_challenge(self, head: bytes, rest: bytes) -> bytes:
        assert self._auth is not None
        status_line, headers = websocket.parse_head(head)
        length = headers.get("content-length", "")
        if status_line.split(" ", 2)[1:2] == ["404"]:
            raise HandshakeRefused(
                f"challenge refused ({status_line[:40]!r}): {self._url} runs without a cluster secret, and "
                f"this node has one; {SECRET_ADVICE}",
                "secret",
            )
        if status_line.split(" ", 2)[1:2] != ["200"] or not length.isdigit() or int(length) > _MAX_NONCE:
            raise HandshakeError(f"challenge refused: {status_line[:80]!r}")
        if len(rest) < int(length):
            return b""  # the nonce has not all arrived
        nonce = rest[: int(length)].decode("latin-1").strip()
        self._head = b""
        headers_out, self._server_proof = self._auth.upgrade_headers(self._url, nonce, self._introduction)
        self._send_upgrade(headers_out)
        return b""

    def _upgrade_refused(self, status_line: str, body: bytes) -> HandshakeRefused:
        """Why the peer answered the upgrade 403: its body's reason, and which side lacks the secret."""
        reason = " ".join(body.decode("utf-8", "replace").split())[:_MAX_REASON] or "no reason given"
        refused = f"upgrade refused ({status_line[:40]!r})"
        if "secret" not in reason:
            cause = (
                "protocol"
                if "protocol version" in reason
                else "membership"
                if "member" in reason
                else "handshake"
            )
            return HandshakeRefused(f"{refused}: {self._url} says: {reason}", cause)
        # The peer's reason leaves out the fix (kvnode.replica.channel.handshake.AuthError): it is said here,
        # once.
        if self._auth is None:  # the peer's reason is this, from its end
            message = f"{self._url} requires a cluster secret, and this node has none"
        else:
            message = f"{self._url} says: {reason}"
        return HandshakeRefused(f"{refused}: {message}; {SECRET_ADVICE}", "secret")

    def _fail(self, error: ReplicaError, raised: WebSocketError | None = None) -> None:
        """Give the channel up; before the upgrade, ``raised`` (or ``error``) is the attempt's failure."""
        if not self.upgraded.done():
            self.upgraded.set_exception(raised or WebSocketError(str(error)))
        self._listener.drop(self, error)

    def connection_lost(self, exc: Exception | None) -> None:
        error = ReplicaUnavailable(f"{self._url}: connection lost{f': {exc}' if exc else ''}")
        if not self.upgraded.done():
            self.upgraded.set_exception(WebSocketError(str(error)))
        self._listener.drop(self, error)
