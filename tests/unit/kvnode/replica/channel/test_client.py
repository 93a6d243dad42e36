"""kvnode.replica.channel: the client end of a replica channel, fed bytes as a transport would: the
challenge and the upgrade (with and without a cluster secret), a refusal named by what it was about, then
frames handed to the listener, pings answered, pongs with a payload told, and the channel given up on a
close, a broken frame or a lost connection."""

from __future__ import annotations

import base64
import hashlib
import logging

import pytest
from multidict import CIMultiDict

from kvnode.replica.channel import websocket
from kvnode.replica.channel.client import PEER_PATH, ClientChannel, HandshakeRefused
from kvnode.replica.channel.handshake import CHALLENGE_PATH, ClusterAuth, Introduction
from kvnode.replica.channel.websocket import HandshakeError, WebSocketError
from kvnode.replica.errors import ReplicaError, ReplicaProtocolError, ReplicaUnavailable
from kvnode.topology.membership import cluster_identity

URL, OWN_URL = "http://b:1", "http://a:1"
CLUSTER = cluster_identity((OWN_URL, URL))
SECRET = b"a cluster secret of more than enough bytes"


class Transport:
    """What the channel wrote."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


class Listener:
    def __init__(self) -> None:
        self.heard = 0
        self.frames: list[bytes] = []
        self.pongs: list[bytes] = []
        self.writable_calls = 0
        self.drops: list[tuple[ReplicaError, int]] = []

    def heard_from(self, channel: ClientChannel) -> None:
        self.heard += 1

    def received(self, channel: ClientChannel, frame: bytes) -> None:
        self.frames.append(frame)

    def ponged(self, channel: ClientChannel, payload: bytes) -> None:
        self.pongs.append(payload)

    def writable(self, channel: ClientChannel) -> None:
        self.writable_calls += 1

    def drop(self, channel: ClientChannel, error: ReplicaError, level: int = logging.WARNING) -> None:
        self.drops.append((error, level))


def connected(auth: ClusterAuth | None = None) -> tuple[ClientChannel, Transport, Listener]:
    listener, transport = Listener(), Transport()
    channel = ClientChannel(listener, URL, "b:1", auth, max_frame=1 << 20)
    channel.connection_made(transport)  # type: ignore[arg-type]  # the channel only writes to it
    return channel, transport, listener


def request_headers(request: bytes) -> CIMultiDict[str]:
    """An HTTP request's headers, as a server reads them (names in any case)."""
    lines = request.decode("latin-1").split("\r\n\r\n")[0].split("\r\n")[1:]
    return CIMultiDict(line.split(": ", 1) for line in lines)  # type: ignore[misc]


def accepted(request: bytes, headers: dict[str, str] | None = None) -> bytes:
    """The 101 a server answers ``request`` with."""
    key = request_headers(request)["Sec-WebSocket-Key"].encode()
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()).decode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n{extra}\r\n"
    ).encode()


def frame(opcode: int, payload: bytes) -> bytes:
    """A short frame as a server sends it: final, unmasked."""
    return bytes((0x80 | opcode, len(payload))) + payload


def upgraded() -> tuple[ClientChannel, Transport, Listener]:
    channel, transport, listener = connected()
    channel.data_received(accepted(transport.written[0]))
    assert channel.upgraded.done() and channel.upgraded.exception() is None
    return channel, transport, listener


async def test_the_frames_after_an_accepted_upgrade_go_to_the_listener() -> None:
    channel, transport, listener = connected()
    assert transport.written[0].startswith(f"GET {PEER_PATH} HTTP/1.1\r\nHost: b:1\r\n".encode())
    stream = accepted(transport.written[0]) + frame(websocket.OP_BINARY, b"replies")
    cut = stream.index(b"\r\n\r\n") + 2  # the end of the answer's head arrives with the next bytes
    channel.data_received(stream[:cut])
    assert not channel.upgraded.done() and listener.heard == 0
    channel.data_received(stream[cut:])
    assert channel.upgraded.done() and channel.upgraded.exception() is None
    assert listener.frames == [b"replies"] and listener.heard == 1
    channel.send(b"calls")
    assert transport.written[-1] == websocket.encode_frame(websocket.OP_BINARY, b"calls")


async def test_a_ping_is_answered_a_pong_with_a_payload_told_and_a_close_gives_the_channel_up_quietly() -> (
    None
):
    channel, transport, listener = upgraded()
    heard = listener.heard
    channel.data_received(frame(websocket.OP_PING, b"hi"))
    assert transport.written[-1] == websocket.encode_frame(websocket.OP_PONG, b"hi")
    channel.data_received(frame(websocket.OP_PONG, b""))
    assert listener.drops == [] and listener.heard == heard + 2  # a pong says the peer is alive too
    assert listener.pongs == []  # an empty pong answers a plain ping: nothing more to tell
    channel.ping(b"clock")
    assert transport.written[-1] == websocket.encode_frame(websocket.OP_PING, b"clock")
    channel.data_received(frame(websocket.OP_PONG, b"clock, and the peer's"))  # a clock ping's answer
    assert listener.pongs == [b"clock, and the peer's"] and listener.heard == heard + 3
    channel.data_received(frame(websocket.OP_CLOSE, b""))
    [(error, level)] = listener.drops
    assert isinstance(error, ReplicaUnavailable) and level == logging.INFO
    assert str(error) == f"{URL} closed the replica channel"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (frame(websocket.OP_TEXT, b"text"), "unexpected WebSocket opcode 1"),
        (bytes((0x82, 0x80 | 1)) + b"\x00" * 4 + b"x", "a server frame is masked"),
    ],
)
async def test_a_frame_outside_the_protocol_gives_the_channel_up(data: bytes, reason: str) -> None:
    channel, _, listener = upgraded()
    channel.data_received(data)
    [(error, level)] = listener.drops
    assert isinstance(error, ReplicaProtocolError) and level == logging.WARNING
    assert str(error) == f"{URL}: {reason}"
    assert listener.frames == []


async def test_a_wrong_accept_or_an_endless_head_fails_the_upgrade() -> None:
    channel, transport, listener = connected()
    channel.data_received(accepted(transport.written[0]).replace(b"Accept: ", b"Accept: x"))
    with pytest.raises(HandshakeError, match="wrong Sec-WebSocket-Accept"):
        channel.upgraded.result()
    assert isinstance(listener.drops[0][0], ReplicaProtocolError)
    channel, _, _ = connected()
    channel.data_received(b"HTTP/1.1 101 Switching Protocols\r\nX: " + b"y" * 20_000)
    with pytest.raises(HandshakeError, match="answer headers too long"):
        channel.upgraded.result()


@pytest.mark.parametrize(
    ("body", "cause", "text"),
    [
        (b"not a member of this cluster", "membership", f"{URL} says: not a member of this cluster"),
        (
            b"no cluster credentials: it has a secret",
            "secret",
            "requires a cluster secret, and this node has none",
        ),
        (b"meant   another\r\nnode", "handshake", f"{URL} says: meant another node"),
        (b"", "handshake", f"{URL} says: no reason given"),
    ],
)
async def test_a_refused_upgrade_names_what_it_was_about(body: bytes, cause: str, text: str) -> None:
    channel, _, listener = connected()
    channel.data_received(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    with pytest.raises(HandshakeRefused) as refused:
        channel.upgraded.result()
    assert refused.value.cause == cause and text in str(refused.value), str(refused.value)
    assert str(refused.value).startswith("upgrade refused ('HTTP/1.1 403 Forbidden')")
    assert len(listener.drops) == 1


async def test_a_lost_connection_fails_the_upgrade_and_gives_the_channel_up() -> None:
    channel, _, listener = connected()
    channel.connection_lost(ConnectionResetError("reset by peer"))
    with pytest.raises(WebSocketError, match="connection lost: reset by peer"):
        channel.upgraded.result()
    [(error, _)] = listener.drops
    assert isinstance(error, ReplicaUnavailable) and str(error) == f"{URL}: connection lost: reset by peer"


async def test_a_full_write_buffer_pauses_the_channel_until_it_drains() -> None:
    channel, _, listener = upgraded()
    channel.pause_writing()
    paused = (channel.paused, listener.writable_calls)
    channel.resume_writing()
    assert [paused, (channel.paused, listener.writable_calls)] == [(True, 0), (False, 1)]


def challenge_answer(nonce: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(nonce)}\r\n\r\n{nonce}".encode()


async def test_with_a_secret_the_challenge_comes_first_and_each_end_proves_itself() -> None:
    server = ClusterAuth(SECRET, CLUSTER, URL)
    channel, transport, _ = connected(ClusterAuth(SECRET, CLUSTER, OWN_URL))
    assert transport.written == [f"GET {CHALLENGE_PATH} HTTP/1.1\r\nHost: b:1\r\n\r\n".encode()]
    answer = challenge_answer(server.issue_nonce())
    channel.data_received(answer[:-5])  # the nonce arrives in two parts
    assert len(transport.written) == 1
    channel.data_received(answer[-5:])
    upgrade = transport.written[1]
    assert upgrade.startswith(f"GET {PEER_PATH} ".encode())
    headers = request_headers(upgrade)
    client, _ = server.admit(headers)
    assert client == OWN_URL
    channel.data_received(accepted(upgrade, server.answer_headers(headers, Introduction())))
    assert channel.upgraded.done() and channel.upgraded.exception() is None


async def test_with_a_secret_a_server_that_cannot_prove_it_holds_it_is_refused() -> None:
    impostor = ClusterAuth(b"another secret, long enough to pass", CLUSTER, URL)
    channel, transport, _ = connected(ClusterAuth(SECRET, CLUSTER, OWN_URL))
    channel.data_received(challenge_answer(impostor.issue_nonce()))
    upgrade = transport.written[1]
    headers = request_headers(upgrade)
    channel.data_received(accepted(upgrade, impostor.answer_headers(headers, Introduction())))
    with pytest.raises(
        HandshakeRefused, match="did not prove it holds this node's cluster secret"
    ) as refused:
        channel.upgraded.result()
    assert refused.value.cause == "secret"


@pytest.mark.parametrize(
    ("answer", "error", "text"),
    [
        (
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            HandshakeRefused,
            "runs without a cluster secret",
        ),
        (b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n", HandshakeError, "challenge refused"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n", HandshakeError, "challenge refused"),
    ],
)
async def test_a_challenge_not_given_fails_the_upgrade(
    answer: bytes, error: type[HandshakeError], text: str
) -> None:
    channel, _, _ = connected(ClusterAuth(SECRET, CLUSTER, OWN_URL))
    channel.data_received(answer)
    with pytest.raises(error, match=text):
        channel.upgraded.result()
