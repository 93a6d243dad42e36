"""A lean HTTP/1.1 client connection for the load generator: keep-alive, one request at a time.

aiohttp's client costs 110-150 µs of CPU a request on this machine, which capped the old generator near
2,000 req/s. This is an ``asyncio.Protocol`` that writes request bytes the caller encoded
(:class:`RequestEncoder`) and reads only what it needs from the answer: the status, ``Content-Length``
and ``Connection: close``, a few µs of Python a request (and the ``ETag``, for a connection that carries
the cas op, whose write names the version its read found). It does not pipeline: a connection carries one
request at a time, as wrk2's connections do.

The answer, or the failure, goes to the ``on_done`` callback given at construction, with the status as
text ("200", "504") or the kind of failure ("connection", "timeout", "bad-response").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import cast
from urllib.parse import urlsplit

from loadtest.workload import Workload, cas_condition

__all__ = ["BAD_RESPONSE", "CONNECTION_ERROR", "TIMEOUT", "HttpConnection", "RequestEncoder", "host_port"]

CONNECTION_ERROR = "connection"  # refused, reset or closed before the whole answer arrived
TIMEOUT = "timeout"  # aborted by the caller (HttpConnection.time_out)
BAD_RESPONSE = "bad-response"  # not HTTP/1.x, no Content-Length, or bytes nobody asked for
_MAX_HEAD = 64 * 1024  # a head longer than this is garbage, not an answer to wait for
_NO_BODY = (b"204", b"304")


def host_port(url: str) -> tuple[str, int]:
    """("127.0.0.1", 8080) for "http://127.0.0.1:8080"."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"URLs look like http://HOST:PORT, got {url!r}")
    return parts.hostname, parts.port


class RequestEncoder:
    """The bytes of the workload's next request to one server, built from pre-encoded pieces.

    Keys come from :func:`loadtest.workload.key_name` (letters, digits and a dash), so they go into the
    query string as they are; the ack/from suffix, the headers and a PUT's body are encoded once.
    ``keys``: the only keys sent to this server (default: any of the workload's).
    """

    def __init__(self, workload: Workload, url: str, keys: Sequence[str] | None = None) -> None:
        host, port = host_port(url)
        self.workload = workload
        self.keys = keys
        query = "".join(f"&{name}={value}" for name, value in workload.quorum_params().items())
        target = f"{workload.path}?id=".encode()
        headers = "".join(f"{name}: {value}\r\n" for name, value in workload.headers().items())
        head_end = f"{query} HTTP/1.1\r\nHost: {host}:{port}\r\n{headers}".encode()
        value = workload.value
        body = f"Content-Length: {len(value)}\r\n\r\n".encode() + value
        self._pieces = {
            "GET": (b"GET " + target, head_end + b"\r\n"),
            "DELETE": (b"DELETE " + target, head_end + b"\r\n"),
            "PUT": (b"PUT " + target, head_end + body),
        }
        self._put = (b"PUT " + target, head_end, body)  # a cas write's condition goes between

    def next(self) -> tuple[bytes, str]:
        """(request bytes, method) of the workload's next request."""
        method = self.workload.next_method()
        start, end = self._pieces[method]
        return start + self.workload.random_key(self.keys).encode() + end, method

    def cas_read(self) -> tuple[bytes, bytes]:
        """(request bytes, key) of the next cas op's read."""
        key = self.workload.random_key(self.keys).encode()
        start, end = self._pieces["GET"]
        return start + key + end, key

    def cas_write(self, key: bytes, etag: bytes) -> bytes:
        """The request bytes of a cas op's conditional write of ``key``, over the version ``etag`` names
        (b"": only if the key has no live value)."""
        start, head_end, body = self._put
        condition = "".join(f"{name}: {value}\r\n" for name, value in cas_condition(etag).items())
        return start + key + head_end + condition.encode() + body


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection to ``host:port``, carrying one request at a time.

    ``send`` writes a request; when its answer is complete (or the connection fails) ``on_done(self,
    outcome)`` runs, and the connection is ready for the next ``send``. A connection the server closed
    stays usable: ``connected`` is then False and the caller calls ``connect`` again before sending.
    """

    __slots__ = (
        "_buffer", "_close_after", "_closing", "_expected", "_on_done", "_status", "_timed_out",
        "_transport", "busy", "etag", "host", "intended", "key", "method", "port", "reads_etag", "sent_at",
        "target",
    )  # fmt: skip

    def __init__(
        self, host: str, port: int, target: int, on_done: Callable[[HttpConnection, str], None]
    ) -> None:
        self.host = host
        self.port = port
        self.target = target  # the caller's index of this server
        # The request in flight, as the caller noted it: when it was due, when it was written, its method.
        self.intended = 0.0
        self.sent_at = 0.0
        self.method = ""
        self.key = b""  # a cas op's key, from its read to its write
        self.reads_etag = False  # keep each answer's ETag (for the cas op); off, no time is spent on it
        self.etag = b""  # the last answer's ETag as the server quoted it, where reads_etag (b"": none)
        self._on_done = on_done
        self._transport: asyncio.Transport | None = None
        self.busy = False  # a request was written and its outcome not reported yet
        self._timed_out = False
        self._buffer = bytearray()
        self._status = b""
        self._expected = -1  # length of the whole answer (head + body) once the head is parsed
        self._close_after = False
        self._closing = 0  # transports this closed after an answer, whose connection_lost is still to come

    @property
    def connected(self) -> bool:
        return self._transport is not None

    async def connect(self) -> None:
        """Open the TCP connection; OSError if the server cannot be reached."""
        await asyncio.get_running_loop().create_connection(lambda: self, self.host, self.port)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is one, though not a subclass

    def send(self, payload: bytes) -> None:
        assert self._transport is not None and not self.busy
        self.busy = True
        self._transport.write(payload)

    def time_out(self) -> None:
        """Give up on the request in flight: the connection is aborted and the outcome is "timeout"."""
        if self.busy and self._transport is not None:
            self._timed_out = True
            self._transport.abort()

    def close(self) -> None:
        """Close it: ``connected`` reads False at once (its connection_lost, later, is ignored)."""
        closing, self._transport = self._transport, None
        if closing is not None:
            self._closing += 1
            closing.close()

    def data_received(self, data: bytes) -> None:
        # Usually the whole answer arrives in one piece: parse it without copying into the buffer.
        if self._buffer:
            self._buffer += data
            data = bytes(self._buffer)
        if self._expected < 0 and not self._parse_head(data):
            return
        if len(data) < self._expected:
            if not self._buffer:
                self._buffer += data
            return
        if len(data) > self._expected or not self.busy:  # bytes nobody asked for
            self._fail(BAD_RESPONSE)
            return
        status = self._status.decode()
        self._reset()
        self.busy = False
        if self._close_after:
            # Let go of it before on_done: a caller with requests waiting sends the next one at once,
            # and must see it closed and reconnect (on a busy machine it wrote to the closing one, and
            # that request failed). Its connection_lost comes later, and is ignored.
            self.close()
        self._on_done(self, status)

    def _parse_head(self, data: bytes) -> bool:
        """Find the head's end and the answer's length; False when more bytes are needed or it failed."""
        end = data.find(b"\r\n\r\n")
        if end < 0:
            if len(data) > _MAX_HEAD:
                self._fail(BAD_RESPONSE)
            elif not self._buffer:
                self._buffer += data
            return False
        head = data[:end].lower()
        status = data[9:12]
        if not head.startswith(b"http/1.") or not status.isdigit():
            self._fail(BAD_RESPONSE)
            return False
        length = 0
        if status not in _NO_BODY:
            # Chunked answers are not expected from the servers this loads (aiohttp sends Content-Length
            # for every Response); one without a length cannot be delimited, so it is an error.
            start = head.find(b"\r\ncontent-length:")
            if start < 0:
                self._fail(BAD_RESPONSE)
                return False
            start += 17
            stop = head.find(b"\r\n", start)
            try:
                length = int(head[start : stop if stop >= 0 else len(head)])
            except ValueError:
                self._fail(BAD_RESPONSE)
                return False
        self._status = status
        self._expected = end + 4 + length
        self._close_after = b"\r\nconnection: close" in head
        if self.reads_etag:
            self.etag = _header(data, head, b"\r\netag:")
        return True

    def _reset(self) -> None:
        self._buffer.clear()
        self._expected = -1

    def _fail(self, outcome: str) -> None:
        self._reset()
        if self._transport is not None:
            self._transport.abort()
        if self.busy:
            self.busy = False
            self._on_done(self, outcome)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closing:  # one this closed after its answer (the callbacks run in order: the oldest)
            self._closing -= 1
            return
        self._transport = None
        outcome = TIMEOUT if self._timed_out else CONNECTION_ERROR
        self._timed_out = False
        self._reset()
        if self.busy:
            self.busy = False
            self._on_done(self, outcome)


def _header(data: bytes, head: bytes, name: bytes) -> bytes:
    """The value of the header ``name`` (``b"\\r\\nname:"``, lowercase) in ``data``, whose head
    lowercased is ``head`` (b"": it has none)."""
    start = head.find(name)
    if start < 0:
        return b""
    start += len(name)
    stop = head.find(b"\r\n", start)
    return bytes(data[start : stop if stop >= 0 else len(head)]).strip()
