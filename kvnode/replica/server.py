"""The server end of a replica channel: answers a peer's calls from this node's storage.

Every record received moves this node's clock past its timestamp, unless it is stamped beyond the maximum
skew ahead of this node's wall clock: such a record is refused (REFUSED), not stored.
"""

from __future__ import annotations

import logging

import aiohttp
from aiohttp import WSMsgType, web

from kvnode.clock import HybridClock
from kvnode.records import CorruptRecord, decode, encode
from kvnode.replica import wire
from kvnode.storage import Storage, StorageError

__all__ = ["answer_call", "serve_peer"]

log = logging.getLogger(__name__)


def answer_call(storage: Storage, clock: HybridClock, call: wire.ReplicaCall) -> bytes:
    """Run one peer call against local storage and encode the reply."""
    try:
        if call.op is wire.Op.READ:
            found = storage.read(call.key)
            if found is None:
                return wire.encode_reply(call.call_id, wire.Status.ABSENT)
            return wire.encode_reply(call.call_id, wire.Status.FOUND, encode(found))
        record = decode(call.record)
        if not clock.observe(record.timestamp):
            reason = f"record stamped {record.timestamp} is beyond the maximum clock skew ahead of this node"
            return wire.encode_reply(call.call_id, wire.Status.REFUSED, reason.encode())
        held = storage.apply(call.key, record)
        if held == record:
            return wire.encode_reply(call.call_id, wire.Status.STORED)
        return wire.encode_reply(call.call_id, wire.Status.NEWER, wire.encode_timestamp(held.timestamp))
    except (CorruptRecord, StorageError) as error:
        return wire.encode_reply(call.call_id, wire.Status.FAILED, str(error).encode())


async def serve_peer(
    request: web.Request, storage: Storage, clock: HybridClock, sockets: set[web.WebSocketResponse]
) -> web.WebSocketResponse:
    """One reply frame for each request frame, until the peer closes the channel."""
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
                await ws.send_bytes(b"".join([answer_call(storage, clock, call) for call in calls]))
            except ConnectionError:  # the peer went away mid-reply; its calls fail on its side
                break
    finally:
        sockets.discard(ws)
    return ws
