"""Replica transport: how a coordinator reaches the replicas of a key, and how a node answers its peers.

A replica call returns an ``asyncio.Future`` at once (no task per call) that ends in the replica's answer
or in one of the ReplicaError types below; nothing else escapes to the coordinator.

- :class:`LocalReplica` calls this node's storage directly.
- :class:`PeerReplica` multiplexes calls by id over one persistent WebSocket to the peer's
  ``/v0/internal/replica`` (the node's single port); every call of one loop tick leaves in one frame.
  Its client end is a plain ``asyncio.Protocol`` (see kvnode.websocket for why).
  It connects lazily, fails calls fast while the peer is down, and reconnects with backoff.
- :func:`serve_peer` is the other end: it answers a peer's frames from local storage.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import urllib.parse
from typing import Protocol, cast

import aiohttp
from aiohttp import WSMsgType, web

from kvnode import websocket, wire
from kvnode.records import CorruptRecord, Record, decode, encode
from kvnode.storage import Storage, StorageError
from kvnode.websocket import WebSocketError

__all__ = [
    "PEER_PATH",
    "LocalReplica",
    "PeerReplica",
    "Replica",
    "ReplicaError",
    "ReplicaProtocolError",
    "ReplicaRejected",
    "ReplicaTimeout",
    "ReplicaUnavailable",
    "serve_peer",
]

log = logging.getLogger(__name__)

PEER_PATH = "/v0/internal/replica"
_MIN_BACKOFF = 0.05
_MAX_BACKOFF = 1.0


class ReplicaError(Exception):
    """A replica call failed; the coordinator counts the replica as failed."""


class ReplicaUnavailable(ReplicaError):
    """The replica cannot be reached: connection refused or lost, or the peer is backing off."""


class ReplicaTimeout(ReplicaError):
    """The replica did not answer within the timeout."""


class ReplicaProtocolError(ReplicaError):
    """The replica answered something that is not the replica protocol."""


class ReplicaRejected(ReplicaError):
    """The replica answered, with an error of its own (a corrupt record, a storage failure)."""


class Replica(Protocol):
    url: str

    def read(self, key: bytes) -> asyncio.Future[Record | None]: ...

    def write(self, key: bytes, record: Record) -> asyncio.Future[int]:
        """Resolves to the timestamp of the version the replica holds afterwards."""
        ...


class LocalReplica:
    """This node's own storage as a replica. Create it inside the running event loop."""

    def __init__(self, url: str, storage: Storage) -> None:
        self.url = url
        self._storage = storage
        self._loop = asyncio.get_running_loop()

    def read(self, key: bytes) -> asyncio.Future[Record | None]:
        future: asyncio.Future[Record | None] = self._loop.create_future()
        try:
            future.set_result(self._storage.read(key))
        except CorruptRecord as error:
            future.set_exception(ReplicaRejected(f"{self.url}: stored record is corrupt: {error}"))
        return future

    def write(self, key: bytes, record: Record) -> asyncio.Future[int]:
        future: asyncio.Future[int] = self._loop.create_future()
        try:
            future.set_result(self._storage.apply(key, record).timestamp)
        except StorageError as error:
            future.set_exception(ReplicaRejected(f"{self.url}: {error}"))
        return future


class PeerReplica:
    """One peer node, reached over a persistent multiplexed WebSocket.

    States: connected (calls are sent); stalled (connected, but silent for a whole timeout: new calls fail
    at once, except one probe at a time, until a reply arrives); connecting for the first time (calls wait
    in the outbox); and down after a failure (calls fail at once while one reconnect attempt runs in the
    background, at most every backoff seconds). Calls made in one loop tick leave together in one frame.
    Create it inside the running event loop.
    """

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self._loop = asyncio.get_running_loop()
        parts = urllib.parse.urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._timeout = timeout
        self._channel: _Channel | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._down = False
        self._stalled = False
        self._closed = False
        self._retry_at = 0.0
        self._backoff = _MIN_BACKOFF
        self._last_reply = 0.0
        self._next_id = 0
        self._calls: dict[int, tuple[asyncio.Future[object], wire.Op]] = {}
        # Every call has the same timeout, so deadlines arrive in call order: one queue and one timer
        # per channel replace a timer per call. Entries of calls already answered are skipped.
        self._deadlines: collections.deque[tuple[float, int]] = collections.deque()
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._outbox: list[bytes] = []
        self._flush_scheduled = False

    def read(self, key: bytes) -> asyncio.Future[Record | None]:
        return self._call(wire.Op.READ, key, b"")  # type: ignore[return-value]

    def write(self, key: bytes, record: Record) -> asyncio.Future[int]:
        return self._call(wire.Op.WRITE, key, encode(record))  # type: ignore[return-value]

    @property
    def state(self) -> str:
        if self._channel is not None:
            return "stalled" if self._stalled else "connected"
        return "down" if self._down else "idle"

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        if self._channel is not None:
            self._channel.transport.close()
        self._disconnect(ReplicaUnavailable(f"{self.url}: transport closed"))

    def _call(self, op: wire.Op, key: bytes, record: bytes) -> asyncio.Future[object]:
        loop = self._loop
        future: asyncio.Future[object] = loop.create_future()
        if self._channel is None:
            if self._closed:
                future.set_exception(ReplicaUnavailable(f"{self.url}: transport closed"))
                return future
            if self._connecting is None and loop.time() >= self._retry_at:
                self._connecting = loop.create_task(self._connect())
            if self._down:
                future.set_exception(ReplicaUnavailable(f"{self.url} is unreachable"))
                return future
        elif self._stalled and (self._calls or loop.time() < self._retry_at):
            future.set_exception(ReplicaUnavailable(f"{self.url} is not answering"))
            return future
        self._next_id = call_id = (self._next_id + 1) & 0xFFFFFFFF
        self._calls[call_id] = (future, op)
        self._deadlines.append((loop.time() + self._timeout, call_id))
        if self._sweep_timer is None:
            self._sweep_timer = loop.call_at(self._deadlines[0][0], self._sweep)
        self._outbox.append(wire.encode_call(call_id, op, key, record))
        if self._channel is not None and not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._channel is not None and self._outbox:
            self._channel.send(b"".join(self._outbox))
            self._outbox.clear()

    async def _connect(self) -> None:
        loop = self._loop
        channel: _Channel | None = None
        try:
            async with asyncio.timeout(self._timeout):
                _, channel = await loop.create_connection(
                    lambda: _Channel(self, self._host, self._port), self._host, self._port
                )
                await channel.upgraded
        except (OSError, TimeoutError, WebSocketError) as error:
            if channel is not None:  # a frozen peer accepts TCP but never answers the upgrade
                channel.transport.abort()
            self._mark_down(ReplicaUnavailable(f"{self.url} is unreachable: {error or type(error).__name__}"))
            return
        except asyncio.CancelledError:
            if channel is not None:
                channel.transport.abort()
            raise
        finally:
            self._connecting = None
        if self._closed:
            channel.transport.close()
            return
        self._channel, self._down, self._stalled = channel, False, False
        self._backoff, self._last_reply = _MIN_BACKOFF, loop.time()
        self._flush()
        log.info("replica channel to %s connected", self.url)

    def _received(self, channel: _Channel, frame: bytes) -> None:
        self._last_reply = self._loop.time()
        if self._stalled:
            self._stalled, self._backoff = False, _MIN_BACKOFF
            log.info("replica %s answers again", self.url)
        try:
            replies = wire.decode_replies(frame)
        except wire.WireError as error:
            self._drop(channel, ReplicaProtocolError(f"{self.url}: malformed reply frame: {error}"))
            return
        for reply in replies:
            self._resolve(reply)

    def _resolve(self, reply: wire.ReplicaReply) -> None:
        entry = self._calls.pop(reply.call_id, None)
        if entry is None:
            return  # the call already timed out
        future, op = entry
        if future.done():
            return
        try:
            future.set_result(_answer_of(op, reply))
        except CorruptRecord as error:
            future.set_exception(ReplicaProtocolError(f"{self.url}: malformed record in reply: {error}"))
        except wire.WireError as error:
            future.set_exception(ReplicaProtocolError(f"{self.url}: {error}"))
        except ReplicaRejected as error:
            future.set_exception(ReplicaRejected(f"{self.url}: {error}"))

    def _sweep(self) -> None:
        """Fail the calls whose deadline has passed, then wait for the next deadline."""
        self._sweep_timer = None
        now = self._loop.time()
        deadlines, expired = self._deadlines, False
        while deadlines and deadlines[0][0] <= now:
            entry = self._calls.pop(deadlines.popleft()[1], None)
            if entry is not None and not entry[0].done():
                entry[0].set_exception(ReplicaTimeout(f"{self.url} did not answer within {self._timeout:g}s"))
                expired = True
        if deadlines:
            self._sweep_timer = self._loop.call_at(deadlines[0][0], self._sweep)
        if expired and self._channel is not None and now - self._last_reply >= self._timeout:
            self._stall(now)

    def _stall(self, now: float) -> None:
        """Silent for a whole timeout while calls wait: the peer is stopped or swamped. New calls fail
        fast instead of queueing behind it, but for one probe call at a time, no more often than the
        backoff allows; calls in flight keep their own deadlines, and the connection stays, so a peer
        that resumes is answering again with its first reply."""
        if not self._stalled:
            self._stalled = True
            log.warning("replica %s stalled: no reply for %gs", self.url, self._timeout)
        self._retry_at = now + self._backoff
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF)

    def _drop(self, channel: _Channel, error: ReplicaError, level: int = logging.WARNING) -> None:
        """Give up a channel: fail its calls, close it, reconnect on a later call."""
        channel.transport.abort()
        if self._channel is not channel:
            return
        log.log(level, "replica channel to %s dropped: %s", self.url, error)
        self._disconnect(error)
        self._down = True
        self._retry_at = self._loop.time()  # the first reconnect may try at once

    def _mark_down(self, error: ReplicaError) -> None:
        self._disconnect(error)
        self._down = True
        self._retry_at = self._loop.time() + self._backoff
        self._backoff = min(self._backoff * 2, _MAX_BACKOFF)

    def _disconnect(self, error: ReplicaError) -> None:
        """Forget the channel and fail every call still waiting on it."""
        self._channel = None
        self._outbox.clear()
        calls, self._calls = self._calls, {}
        self._deadlines.clear()
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        for future, _ in calls.values():
            if not future.done():
                future.set_exception(error)


class _Channel(asyncio.Protocol):
    """The client end of one replica WebSocket: upgrade handshake, then frames parsed as they arrive."""

    transport: asyncio.Transport

    def __init__(self, peer: PeerReplica, host: str, port: int) -> None:
        self._peer = peer
        self._request, self._accept = websocket.handshake_request(host, port, PEER_PATH)
        self._head = b""
        self._decoder: websocket.FrameDecoder | None = None
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport.write(self._request)

    def send(self, payload: bytes) -> None:
        self.transport.write(websocket.encode_frame(websocket.OP_BINARY, payload))

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
        for opcode, payload in messages:
            if opcode == websocket.OP_BINARY:
                self._peer._received(self, payload)
            elif opcode == websocket.OP_PING:
                self.transport.write(websocket.encode_frame(websocket.OP_PONG, payload))
            elif opcode == websocket.OP_CLOSE:  # the peer is shutting down: expected, not a fault
                self._peer._drop(
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
            if len(self._head) > 16384:
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
        self._peer._drop(self, error)

    def connection_lost(self, exc: Exception | None) -> None:
        error = ReplicaUnavailable(f"{self._peer.url}: connection lost{f': {exc}' if exc else ''}")
        if not self.upgraded.done():
            self.upgraded.set_exception(WebSocketError(str(error)))
        self._peer._drop(self, error)


def _answer_of(op: wire.Op, reply: wire.ReplicaReply) -> object:
    """The value a call resolves to, from its reply; raises for a FAILED or mismatched reply."""
    status = reply.status
    if status is wire.Status.FAILED:
        raise ReplicaRejected(reply.payload.decode("utf-8", "replace"))
    if op is wire.Op.READ and status is wire.Status.FOUND:
        return decode(reply.payload)
    if op is wire.Op.READ and status is wire.Status.ABSENT:
        return None
    if op is wire.Op.WRITE and status is wire.Status.STORED:
        return wire.decode_stored(reply.payload)
    raise wire.WireError(f"reply {status.name} does not answer a {op.name}")


def answer_call(storage: Storage, call: wire.ReplicaCall) -> bytes:
    """Run one peer call against local storage and encode the reply."""
    try:
        if call.op is wire.Op.READ:
            record = storage.read(call.key)
            if record is None:
                return wire.encode_reply(call.call_id, wire.Status.ABSENT)
            return wire.encode_reply(call.call_id, wire.Status.FOUND, encode(record))
        stored = storage.apply(call.key, decode(call.record))
        return wire.encode_reply(call.call_id, wire.Status.STORED, wire.encode_stored(stored.timestamp))
    except (CorruptRecord, StorageError) as error:
        return wire.encode_reply(call.call_id, wire.Status.FAILED, str(error).encode())


async def serve_peer(
    request: web.Request, storage: Storage, sockets: set[web.WebSocketResponse]
) -> web.WebSocketResponse:
    """The server end of a replica channel: one reply frame for each request frame."""
    ws = web.WebSocketResponse(max_msg_size=0, compress=False)
    await ws.prepare(request)
    sockets.add(ws)
    try:
        async for message in ws:
            if message.type is not WSMsgType.BINARY:
                await ws.close(code=aiohttp.WSCloseCode.UNSUPPORTED_DATA, message=b"binary frames only")
                break
            try:
                calls = wire.decode_calls(message.data)
            except wire.WireError as error:
                log.warning("closing replica channel from %s: %s", request.remote, error)
                await ws.close(code=aiohttp.WSCloseCode.PROTOCOL_ERROR, message=str(error).encode()[:120])
                break
            try:
                await ws.send_bytes(b"".join([answer_call(storage, call) for call in calls]))
            except ConnectionError:  # the peer went away mid-reply; its calls fail on its side
                break
    finally:
        sockets.discard(ws)
    return ws
