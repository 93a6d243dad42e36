"""Just enough RFC 6455 for the client end of a replica channel: the upgrade handshake and frames.

The server end is aiohttp's ``WebSocketResponse``. The client end is this lean codec driven from an
``asyncio.Protocol`` (see channel.py), which parses frames inside ``data_received``, with no task or queue
per call (docs/replica-channel.md).
Pure: no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from collections.abc import Mapping

__all__ = [
    "OP_BINARY",
    "OP_CLOSE",
    "OP_PING",
    "OP_PONG",
    "FrameDecoder",
    "HandshakeError",
    "WebSocketError",
    "check_handshake",
    "encode_frame",
    "handshake_request",
    "parse_head",
]

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# A zero masking key leaves the payload as it is, so sending costs no XOR pass over it. The key exists to
# stop a browser's script from steering bytes through proxies; between our own nodes there is no script.
_ZERO_MASK = b"\x00\x00\x00\x00"
_LEN16 = struct.Struct(">H")
_LEN64 = struct.Struct(">Q")


class WebSocketError(ValueError):
    """Bytes from the server that break the WebSocket framing."""


class HandshakeError(WebSocketError):
    """The server did not accept the upgrade."""


def handshake_request(
    authority: str, path: str, headers: Mapping[str, str] | None = None
) -> tuple[bytes, bytes]:
    """The upgrade request to send (with ``headers`` added), and the Sec-WebSocket-Accept value the server
    must answer with. ``authority`` is the URL's host[:port] as written (an IPv6 host keeps its brackets)."""
    key = base64.b64encode(os.urandom(16))
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key.decode()}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    ).encode()
    return request, accept


def parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """An HTTP answer's status line and its headers (names in lower case)."""
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])
    }
    return lines[0], headers


def check_handshake(head: bytes, accept: bytes) -> dict[str, str]:
    """The upgrade answer's headers; HandshakeError unless ``head`` (status line and headers) is a 101
    with the right accept."""
    status_line, headers = parse_head(head)
    status = status_line.split(" ", 2)
    if len(status) < 2 or status[1] != "101":
        raise HandshakeError(f"upgrade refused: {status_line[:80]!r}")
    if headers.get("sec-websocket-accept", "").encode() != accept:
        raise HandshakeError("upgrade answered with a wrong Sec-WebSocket-Accept")
    return headers


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    size = len(payload)
    if size < 126:
        header = bytes((0x80 | opcode, 0x80 | size))
    elif size < 1 << 16:
        header = bytes((0x80 | opcode, 0x80 | 126)) + _LEN16.pack(size)
    else:
        header = bytes((0x80 | opcode, 0x80 | 127)) + _LEN64.pack(size)
    return header + _ZERO_MASK + payload


class FrameDecoder:
    """Turns the server's byte stream into whole messages: (opcode, payload), fragments reassembled.
    A message longer than ``max_message`` bytes is refused as soon as a frame header announces it,
    before its payload is buffered.

    >>> FrameDecoder().feed(bytes((0x82, 3)) + b"abc")
    [(2, b'abc')]
    """

    def __init__(self, max_message: int = 1 << 62) -> None:
        self._max_message = max_message
        self._buffer = bytearray()
        self._fragments: list[bytes] = []
        self._fragments_size = 0
        self._fragmented_opcode = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buffer = self._buffer
        buffer += data
        messages = []
        while len(buffer) >= 2:
            first, second = buffer[0], buffer[1]
            if first & 0x70:
                raise WebSocketError("reserved bits set: no extension was negotiated")
            if second & 0x80:
                raise WebSocketError("a server frame is masked")
            size, start = second & 0x7F, 2
            if size == 126:
                if len(buffer) < 4:
                    break
                size, start = _LEN16.unpack_from(buffer, 2)[0], 4
            elif size == 127:
                if len(buffer) < 10:
                    break
                size, start = _LEN64.unpack_from(buffer, 2)[0], 10
            if self._fragments_size + size > self._max_message:
                raise WebSocketError(f"message of over {size} bytes exceeds the limit of {self._max_message}")
            if len(buffer) < start + size:
                break
            payload = bytes(buffer[start : start + size])
            del buffer[: start + size]
            message = self._assemble(bool(first & 0x80), first & 0x0F, payload)
            if message is not None:
                messages.append(message)
        return messages

    def _assemble(self, final: bool, opcode: int, payload: bytes) -> tuple[int, bytes] | None:
        if opcode >= OP_CLOSE:  # control frames are never fragmented and may come between fragments
            return opcode, payload
        if opcode == OP_CONTINUATION:
            if not self._fragments:
                raise WebSocketError("continuation frame without a message to continue")
            self._fragments.append(payload)
            self._fragments_size += len(payload)
        elif self._fragments:
            raise WebSocketError("new message before the fragmented one ended")
        elif final:
            return opcode, payload
        else:
            self._fragments, self._fragmented_opcode = [payload], opcode
            self._fragments_size = len(payload)
        if not final:
            return None
        whole, self._fragments, self._fragments_size = b"".join(self._fragments), [], 0
        return self._fragmented_opcode, whole
