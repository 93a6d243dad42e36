"""The replica channel's client-side WebSocket codec (kvnode.replica.channel.websocket), checked against
aiohttp's."""

from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest
from aiohttp import web

from kvnode.replica.channel import websocket
from kvnode.replica.channel.websocket import FrameDecoder, HandshakeError, WebSocketError


def server_frame(opcode: int, payload: bytes, final: bool = True) -> bytes:
    """A frame as a server sends it: unmasked."""
    size = len(payload)
    first = (0x80 if final else 0) | opcode
    if size < 126:
        return bytes((first, size)) + payload
    if size < 1 << 16:
        return bytes((first, 126)) + size.to_bytes(2, "big") + payload
    return bytes((first, 127)) + size.to_bytes(8, "big") + payload


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 300_000])
def test_every_length_encoding_decodes(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    assert FrameDecoder().feed(server_frame(websocket.OP_BINARY, payload)) == [(websocket.OP_BINARY, payload)]


def test_frames_split_at_every_byte_come_out_whole() -> None:
    stream = server_frame(websocket.OP_BINARY, b"first") + server_frame(websocket.OP_BINARY, b"x" * 300)
    decoder = FrameDecoder()
    messages = []
    for offset in range(len(stream)):
        messages += decoder.feed(stream[offset : offset + 1])
    assert messages == [(websocket.OP_BINARY, b"first"), (websocket.OP_BINARY, b"x" * 300)]


def test_fragments_are_reassembled_around_a_control_frame() -> None:
    stream = (
        server_frame(websocket.OP_BINARY, b"ab", final=False)
        + server_frame(websocket.OP_PING, b"p")
        + server_frame(0, b"cd", final=False)
        + server_frame(0, b"ef")
    )
    assert FrameDecoder().feed(stream) == [(websocket.OP_PING, b"p"), (websocket.OP_BINARY, b"abcdef")]


@pytest.mark.parametrize(
    "garbage",
    [
        bytes((0xC2, 1)) + b"x",  # reserved bit set
        bytes((0x82, 0x81)) + b"\0\0\0\0x",  # a masked server frame
        server_frame(0, b"orphan continuation"),
        server_frame(websocket.OP_BINARY, b"a", final=False) + server_frame(websocket.OP_BINARY, b"b"),
    ],
)
def test_broken_framing_raises_websocket_error(garbage: bytes) -> None:
    with pytest.raises(WebSocketError):
        FrameDecoder().feed(garbage)


def test_client_frames_are_masked_with_a_zero_key_and_carry_the_payload() -> None:
    frame = websocket.encode_frame(websocket.OP_BINARY, b"payload")
    assert frame[0] == 0x80 | websocket.OP_BINARY
    assert frame[1] == 0x80 | len(b"payload")
    assert frame[2:6] == b"\0\0\0\0"
    assert frame[6:] == b"payload"


def test_handshake_accept_follows_rfc6455() -> None:
    request, accept = websocket.handshake_request("127.0.0.1:8080", "/v0/internal/replica")
    key = next(
        line.split(b": ")[1] for line in request.split(b"\r\n") if line.startswith(b"Sec-WebSocket-Key")
    )
    expected = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    assert accept == expected
    websocket.check_handshake(b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: " + accept, accept)
    with pytest.raises(HandshakeError):
        websocket.check_handshake(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0", accept)
    with pytest.raises(HandshakeError):
        websocket.check_handshake(b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: nope", accept)


async def test_aiohttp_server_understands_our_frames_and_we_understand_its_frames(
    unused_tcp_port: int,
) -> None:
    """The real counterpart: aiohttp's WebSocketResponse echoes a large binary message back to us."""

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        async for message in ws:
            await ws.send_bytes(message.data[::-1])
        return ws

    app = web.Application()
    app.router.add_get("/echo", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", unused_tcp_port)
        request, accept = websocket.handshake_request(f"127.0.0.1:{unused_tcp_port}", "/echo")
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        websocket.check_handshake(head[:-4], accept)
        payload = bytes(range(256)) * 1000
        writer.write(websocket.encode_frame(websocket.OP_BINARY, payload))
        decoder = FrameDecoder()
        messages: list[tuple[int, bytes]] = []
        while not messages:
            messages = decoder.feed(await reader.read(65536))
        assert messages == [(websocket.OP_BINARY, payload[::-1])]
        writer.close()
    finally:
        await runner.cleanup()


def test_the_frame_decoder_refuses_an_oversize_frame_from_its_header() -> None:
    decoder = FrameDecoder(max_message=1000)
    assert decoder.feed(bytes((0x82, 126)) + (1000).to_bytes(2, "big") + b"x" * 1000) == [(2, b"x" * 1000)]
    with pytest.raises(WebSocketError, match="exceeds the limit"):
        FrameDecoder(max_message=1000).feed(
            bytes((0x82, 127)) + (1 << 40).to_bytes(8, "big")
        )  # no payload yet
    fragments = FrameDecoder(max_message=1000)
    fragments.feed(bytes((0x02, 126)) + (600).to_bytes(2, "big") + b"x" * 600)
    with pytest.raises(WebSocketError, match="exceeds the limit"):
        fragments.feed(bytes((0x80, 126)) + (600).to_bytes(2, "big"))
