"""The server end of a replica channel: its routes, the handshake, and its frames, whose calls are answered
by the answerers the node's parts registered (kvnode.replica.channel.answerers). The client end, its
mirror, is kvnode.replica.channel.client.

With a cluster secret, only a peer that passed the handshake (kvnode.replica.channel.handshake) is upgraded;
anyone else gets a 403 and a rate-limited log line naming its address. Over TLS, a connection that presented
no certificate the cluster's CA signed gets the same before any handshake (kvnode.access.tls). Either way, the
peer's introduction goes to :class:`~kvnode.replica.channel.identities.Identities` before the 101 answers it
with this node's. Each introduction says the replica protocol versions its end speaks, and the channel speaks
the highest both do (kvnode.replica.channel.protocol): a call of a later version is refused as an unknown op,
and a peer that shares no version with this node gets a 403 naming both ranges. Frames are bounded (aiohttp
refuses an oversize frame from its header, before buffering it) and so are the calls in a frame; a peer that
breaks a bound loses its connection. Replies to one frame go out in frames of about ``wire.FRAME_TARGET``
bytes, a deferred call's (a FORWARD's) once it is answered (answerers.LateReplies). A peer's ping is
answered here, not by aiohttp's autoping (a clock ping with this node's clock: kvnode.replica.clock_probe),
and told to the gate: the node counts it as a sign of that peer's life
(kvnode.replica.peer.PeerReplica.pinged).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import aiohttp
from aiohttp import WSMsgType, web

from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers, LateReplies
from kvnode.replica.channel.client import PEER_PATH
from kvnode.replica.channel.handshake import (
    CHALLENGE_PATH,
    CLIENT_HEADER,
    SECRET_ADVICE,
    AuthError,
    ClusterAuth,
    Introduction,
    RateLimitedLog,
)
from kvnode.replica.channel.identities import Identities
from kvnode.replica.channel.protocol import CLOCK_PINGS, LEGACY, clock_pong, negotiate, ops_of

__all__ = ["PeerGate", "ReplicaServer", "answer_challenge", "serve_peer"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PeerGate:
    """Who may open a replica channel to this node (None: anyone), what a peer may send on it, and who
    hears of the peers that open one and of their pings (None: nobody)."""

    auth: ClusterAuth | None
    limits: wire.Limits
    identities: Identities | None = None
    tls: bool = False  # served over TLS: a peer must present a certificate the CA signed
    refusals: RateLimitedLog = field(default_factory=lambda: RateLimitedLog(log))
    pinged: Callable[[str], None] | None = None  # told a peer's URL at each ping on its channel


class ReplicaServer:
    """This node's end of its peers' replica channels: their routes, and the channels open on them, whose
    calls ``answerers`` answer and whose clock pings carry ``clock_now()`` (a CLOCK reply's payload)."""

    def __init__(self, gate: PeerGate, answerers: Answerers, clock_now: Callable[[], bytes]) -> None:
        self.gate = gate
        self.answerers = answerers
        self._clock_now = clock_now
        self._channels: set[web.WebSocketResponse] = set()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(PEER_PATH, self._serve_channel, allow_head=False)
        app.router.add_get(CHALLENGE_PATH, self._answer_challenge, allow_head=False)

    async def close_channels(self) -> None:
        """A channel is one long-lived request: close them all, or a graceful stop would wait for them."""
        for ws in list(self._channels):
            await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"node shutting down")

    async def _serve_channel(self, request: web.Request) -> web.StreamResponse:
        uncertified = _refuse_uncertified(self.gate, request)
        if uncertified is not None:
            return uncertified
        return await serve_peer(request, self.gate, self.answerers, self._clock_now, self._channels)

    async def _answer_challenge(self, request: web.Request) -> web.Response:
        return _refuse_uncertified(self.gate, request) or answer_challenge(self.gate)


def _refuse_uncertified(gate: PeerGate, request: web.Request) -> web.Response | None:
    """A 403 for a TLS connection that presented no client certificate (the TLS layer has verified any
    that was presented against the CA); None when the peer may go on."""
    if not gate.tls or (request.transport is not None and request.transport.get_extra_info("peercert")):
        return None
    gate.refusals.warning("refused a replica channel from %s: no client certificate", request.remote)
    return web.Response(status=403, text="replica channel refused: present a certificate the CA signed\n")


def answer_challenge(gate: PeerGate) -> web.Response:
    """A fresh nonce for a peer about to open a replica channel."""
    if gate.auth is None:
        gate.refusals.warning(
            "refused a replica channel challenge: this node runs without a cluster secret, and the peer "
            "asking has one; %s",
            SECRET_ADVICE,
        )
        return web.Response(status=404, text="this node runs without a cluster secret\n")
    return web.Response(text=gate.auth.issue_nonce())


async def serve_peer(
    request: web.Request,
    gate: PeerGate,
    answerers: Answerers,
    clock_now: Callable[[], bytes],
    sockets: set[web.WebSocketResponse],
) -> web.StreamResponse:
    """Answer each request frame's calls, until the peer closes the channel."""
    ws = web.WebSocketResponse(max_msg_size=gate.limits.max_frame, compress=False, autoping=False)
    if gate.auth is None:
        client, introduction = request.headers.get(CLIENT_HEADER, ""), Introduction.of(request.headers)
    else:
        try:
            client, introduction = gate.auth.admit(request.headers)
        except AuthError as error:
            advice = f"; {error.advice}" if error.advice else ""
            gate.refusals.warning("refused a replica channel from %s: %s%s", request.remote, error, advice)
            return web.Response(status=403, text=f"replica channel refused: {error}\n")
    ours = Introduction() if gate.identities is None else gate.identities.introduce(client)
    mine, theirs = ours.protocols or LEGACY, introduction.protocols or LEGACY
    version = negotiate(mine, theirs)
    if version is None:
        reason = f"no protocol version in common: this node speaks {mine}, {client[:100]} {theirs}"
        gate.refusals.warning("refused a replica channel from %s: %s", request.remote, reason)
        return web.Response(
            status=403, text=f"replica channel refused: {reason}; upgrade one node at a time\n"
        )
    if gate.identities is not None:
        gate.identities.met(client, introduction)  # before the 101: the peer learns of this node after
    ws.headers.update(
        ours.headers() if gate.auth is None else gate.auth.answer_headers(request.headers, ours)
    )
    try:
        await ws.prepare(request)
    except ConnectionError:  # the peer went away before its 101: a normal disconnect, no traceback
        log.info("the replica channel from %s went away during the upgrade", request.remote)
        # Not the unprepared WebSocket: aiohttp would close it after the handler, an ERROR with a traceback.
        gone = web.Response(status=400, text="the peer went away during the upgrade\n")
        gone.force_close()
        return gone
    sockets.add(ws)
    late = LateReplies(partial(_reply, ws))  # a deferred call's reply (answerers), once known
    try:
        limits = dataclasses.replace(gate.limits, ops=ops_of(version))
        pinged = None if gate.pinged is None else partial(gate.pinged, client)
        pong = partial(clock_pong, clock=clock_now) if version >= CLOCK_PINGS else None
        await _answer_frames(request, ws, limits, answerers, pinged, pong, late)
    except ConnectionError:  # the peer went away mid-reply or mid-pong; its calls fail on its side
        log.info("the replica channel from %s closed while this node answered", request.remote)
    finally:
        sockets.discard(ws)
        await late.close()
    return ws


async def _answer_frames(
    request: web.Request,
    ws: web.WebSocketResponse,
    limits: wire.Limits,  # the channel's: its frames' bounds, and its protocol version's ops
    answerers: Answerers,
    pinged: Callable[[], None] | None,  # told of each ping: the peer is alive (PeerReplica.pinged)
    pong: Callable[[bytes], bytes] | None,  # the pong a ping gets (None: its payload echoed)
    late: LateReplies,
) -> None:
    async for message in ws:
        if message.type is WSMsgType.ERROR:  # an oversize frame, or broken framing: already closed
            log.warning("dropped the replica channel from %s: %s", request.remote, message.data)
            return
        if message.type is not WSMsgType.BINARY:
            if message.type is WSMsgType.PING:  # the peer's heartbeat (no autoping: answered here)
                ping = bytes(message.data)  # aiohttp hands a bytearray, which a compiled pong refuses
                await ws.pong(ping if pong is None else pong(ping))
                if pinged is not None:
                    pinged()
                continue
            if message.type is WSMsgType.PONG:  # unasked for: this end never pings
                continue
            await ws.close(code=aiohttp.WSCloseCode.UNSUPPORTED_DATA, message=b"binary frames only")
            return
        try:
            calls = wire.decode_calls(message.data, limits)
        except wire.WireError as error:
            log.warning("dropped the replica channel from %s: %s", request.remote, error)
            await ws.close(code=aiohttp.WSCloseCode.PROTOCOL_ERROR, message=str(error).encode()[:120])
            return
        await _reply(ws, answerers.answer_frame(calls, late))


async def _reply(ws: web.WebSocketResponse, replies: list[bytes]) -> None:
    size = sum(map(len, replies))
    if size < wire.FRAME_TARGET:  # nearly always: the replies fit one frame
        if size:
            await ws.send_bytes(b"".join(replies))
        return
    frame: list[bytes] = []
    size = 0
    for reply in replies:
        frame.append(reply)
        size += len(reply)
        if size >= wire.FRAME_TARGET:
            await ws.send_bytes(b"".join(frame))
            frame, size = [], 0
    if frame:
        await ws.send_bytes(b"".join(frame))
