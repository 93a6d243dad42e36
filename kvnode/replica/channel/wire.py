# Over 350 lines: every message of the replica protocol in one pure codec, which both ends share.
"""The replica channel's binary messages. Pure codec: no I/O.

One WebSocket binary frame carries any number of messages, each prefixed with its length, so a busy
coordinator sends every call of one event-loop tick to a peer in a single frame.

    request = len:u32 | call_id:u32 | op:u8 | key_len:u32 | key | record   (for WRITE, DELETE, ...)
    reply   = len:u32 | call_id:u32 | status:u8 | payload

>>> frame = encode_call(1, Op.READ, b"k") + encode_call(2, Op.WRITE, b"k", b"record")
>>> [(call.call_id, call.op.name, call.record) for call in decode_calls(frame)]
[(1, 'READ', b''), (2, 'WRITE', b'record')]
>>> decode_replies(encode_reply(2, Status.STORED))
[ReplicaReply(call_id=2, status=<Status.STORED: 3>, payload=b'')]

Reply payloads: FOUND carries the stored record, ABSENT nothing; a WRITE is answered STORED (the replica
took the record, or already held that very version: nothing) or NEWER (it holds a newer version: that
version's timestamp, u64), so a coordinator learns that its write lost and to which timestamp (see
kvnode.coordinator.coordinator). CLOCK answers a CLOCK call with the replica's wall clock (u64 microseconds),
from which the caller estimates the offset between their clocks (kvnode.clocks.offsets), followed by the state
of the replica's data (kvnode.healing.rebuild_state, ASCII), which its peers show. REFUSED (a record
stamped beyond the replica's maximum clock skew) and FAILED carry a UTF-8 reason. NOT_READY answers a
READ on a replica whose data is not whole (it rebuilds): a failed replica, never "absent".

Everything a peer sends is bounded (:class:`Limits`, from the node's body limit): a frame's size, the
calls in one frame, a key's and a record's size (a FORWARD's record, a write's with the owners it goes to,
by up to ``MAX_FORWARD_HEADER`` bytes more). A sender splits its calls into frames of about
``FRAME_TARGET`` bytes, and gives a call larger than ``LARGE_CALL`` a frame of its own.
"""

from __future__ import annotations

import enum
import struct
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from kvnode.storage.records import MAX_HEADER_BYTES, Record

__all__ = [
    "CALL_HEADER_BYTES",
    "FRAME_TARGET",
    "LARGE_CALL",
    "MAX_CALLS_PER_FRAME",
    "MAX_FORWARD_HEADER",
    "MAX_FORWARD_TARGETS",
    "MAX_KEY_BYTES",
    "CallRequest",
    "Limits",
    "Op",
    "ReplicaReply",
    "Status",
    "WireError",
    "call_size",
    "decode_calls",
    "decode_clock",
    "decode_delete",
    "decode_hashes",
    "decode_list_request",
    "decode_listing",
    "decode_numbers",
    "decode_replies",
    "decode_timestamp",
    "encode_call",
    "encode_clock",
    "encode_delete",
    "encode_hashes",
    "encode_list_request",
    "encode_listing",
    "encode_numbers",
    "encode_reply",
    "encode_timestamp",
]

_CALL = struct.Struct(">IIBI")
_REPLY = struct.Struct(">IIB")
_CALL_SIZE, _unpack_call, _new_tuple = _CALL.size, _CALL.unpack_from, tuple.__new__
CALL_HEADER_BYTES = _CALL_SIZE  # what a call adds to its key and record (call_size)
_pack_reply, _unpack_reply = _REPLY.pack, _REPLY.unpack_from
_TIMESTAMP = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_DELETE = struct.Struct(">QH")  # a tombstone's timestamp and replica count
_ENTRY = struct.Struct(">HQ")  # key length, version digest
_RECORD_HEADER = MAX_HEADER_BYTES

MAX_KEY_BYTES = 8192  # aiohttp refuses request lines over 8190 bytes, so no client key is longer
# Calls one frame may carry: a frame is answered in one go on the event loop, so this bounds how long one
# frame can hold the loop (docs/replica-channel.md).
MAX_CALLS_PER_FRAME = 1024
FRAME_TARGET = 256 * 1024  # a sender closes a frame of small calls at about this many bytes
LARGE_CALL = 64 * 1024  # a call larger than this travels in a frame of its own
# A FORWARD (protocol version 5: kvnode.coordinator.forwards) carries a write and the owners it goes to, at
# most this many, each a URL of up to 255 bytes: its record is a write's plus at most MAX_FORWARD_HEADER.
MAX_FORWARD_TARGETS = 32
MAX_FORWARD_HEADER = 4 + 1 + MAX_FORWARD_TARGETS * (1 + 255)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one peer may send: the largest record is the node's body limit plus the record header.

    >>> Limits.for_body(1000).max_record
    1019
    """

    max_record: int
    max_calls: int = MAX_CALLS_PER_FRAME
    ops: frozenset[Op] = frozenset()  # the ops the channel's protocol version carries (none named: every op)

    @classmethod
    def for_body(cls, max_body_bytes: int) -> Limits:
        return cls(max_record=max_body_bytes + _RECORD_HEADER)

    @property
    def max_call(self) -> int:
        return _CALL.size + MAX_KEY_BYTES + self.max_record + MAX_FORWARD_HEADER

    @property
    def max_frame(self) -> int:
        """The largest frame either end accepts: a frame closed at FRAME_TARGET holds one more message,
        which is at most one call (requests) or one reply carrying a record (replies)."""
        return FRAME_TARGET + max(self.max_call, _REPLY.size + self.max_record)


class WireError(ValueError):
    """A frame that is not a well-formed sequence of messages."""


class Op(enum.IntEnum):
    READ = 1
    WRITE = 2
    CLOCK = 3  # no key, no record: the replica answers CLOCK with its wall clock (kvnode.clocks.offsets)
    # Anti-entropy (kvnode.healing); the key is the caller's URL, whose summary tree is meant.
    BRANCHES = 4  # no record: answered HASHES, the tree's branch hashes
    SEGMENTS = 5  # record = branches (u16 each): answered HASHES, those branches' segment hashes
    LIST = 6  # record = encode_list_request: answered LISTING, one page of those segments' keys
    FETCH = 7  # a READ for anti-entropy: answered even while the node rebuilds (its versions count too)
    MEMBERSHIP = 8  # no key, no record: answered MEMBERSHIP, the membership the node runs with
    ADOPT = 9  # record = a newer membership, encoded: answered STORED once the node runs with it
    SCAN = 10  # key = where to start; record = kvnode.replica.pages' request: answered RECORDS, one page
    DELETE = 11  # protocol version 2 (channel.protocol): record = encode_delete, answered as a WRITE
    # Protocol version 4, a conditional write's Paxos round (kvnode.paxos): record = the request, encoded
    # by kvnode.paxos.messages; answered PAXOS, its reply so encoded.
    PREPARE = 12
    PROPOSE = 13
    COMMIT = 14
    # Protocol version 5: a write for the owners of one datacenter, sent to one of them, which stores its
    # own copy and relays it to the others (kvnode.coordinator.forwarding); record =
    # kvnode.coordinator.forwards.encode_request, answered FORWARDING as each owner's outcome comes in and
    # FORWARDED with the last.
    FORWARD = 15


class Status(enum.IntEnum):
    FOUND = 1
    ABSENT = 2
    STORED = 3
    FAILED = 4
    NEWER = 5
    REFUSED = 6
    CLOCK = 7
    HASHES = 8  # u64 each
    LISTING = 9  # encode_listing
    NOT_READY = 10
    MEMBERSHIP = 11  # kvnode.topology.membership.Membership.encode
    RECORDS = 12  # kvnode.replica.pages.encode_page
    PAXOS = 13  # an acceptor's reply (kvnode.paxos.messages.encode)
    FORWARDED = 14  # the last owners' outcomes of a FORWARD (kvnode.coordinator.forwards.encode_outcomes)
    FORWARDING = 15  # an owner's outcome of a FORWARD, the call still in flight for the others' (the same)


# By wire value: a dict lookup costs a tenth of calling the enum class.
_OPS = {int(op): op for op in Op}
_STATUSES = {int(status): status for status in Status}
_KEYLESS = frozenset({Op.CLOCK, Op.MEMBERSHIP, Op.ADOPT})  # calls about the node, not a key


class CallRequest(NamedTuple):
    """One call a peer asks this node to run, as decoded from a frame."""

    call_id: int
    op: Op
    key: bytes
    record: bytes


class ReplicaReply(NamedTuple):
    call_id: int
    status: Status
    payload: bytes


def encode_call(call_id: int, op: Op, key: bytes, record: bytes = b"") -> bytes:
    body_len = _CALL.size - 4 + len(key) + len(record)
    return _CALL.pack(body_len, call_id, op, len(key)) + key + record


def call_size(key: bytes, record: bytes = b"") -> int:
    """The bytes ``encode_call`` makes of a call, known before its id is: CALL_HEADER_BYTES more than its
    key and record.

    >>> call_size(b"k", b"rec") == len(encode_call(7, Op.WRITE, b"k", b"rec")) == CALL_HEADER_BYTES + 4
    True
    """
    return CALL_HEADER_BYTES + len(key) + len(record)


def encode_reply(call_id: int, status: Status, payload: bytes = b"") -> bytes:
    return _pack_reply(_REPLY.size - 4 + len(payload), call_id, status) + payload


def encode_timestamp(timestamp: int) -> bytes:
    return _TIMESTAMP.pack(timestamp)


def decode_timestamp(payload: bytes) -> int:
    if len(payload) != _TIMESTAMP.size:
        raise WireError(f"timestamp payload is {len(payload)} bytes, expected {_TIMESTAMP.size}")
    return int(_TIMESTAMP.unpack(payload)[0])


def encode_clock(wall_us: int, node_state: str) -> bytes:
    """A CLOCK reply's payload: the replica's wall clock, and the state of its data.

    >>> decode_clock(encode_clock(1_700_000_000_000_000, "rebuilding"))
    (1700000000000000, 'rebuilding')
    """
    return _TIMESTAMP.pack(wall_us) + node_state.encode()


def decode_clock(payload: bytes) -> tuple[int, str]:
    if len(payload) < _TIMESTAMP.size:
        raise WireError(f"clock payload is {len(payload)} bytes, expected at least {_TIMESTAMP.size}")
    return int(_TIMESTAMP.unpack_from(payload)[0]), payload[_TIMESTAMP.size :].decode("ascii", "replace")


def encode_delete(tombstone: Record) -> bytes:
    """A DELETE call's record: the tombstone's timestamp and replica count, all a tombstone holds."""
    return _DELETE.pack(tombstone.timestamp, tombstone.copies)


def decode_delete(record: bytes) -> Record:
    if len(record) != _DELETE.size:
        raise WireError(f"DELETE record is {len(record)} bytes, expected {_DELETE.size}")
    timestamp, copies = _DELETE.unpack(record)
    return Record.delete(timestamp, copies=copies)


def encode_hashes(hashes: Iterable[int]) -> bytes:
    """u64 hashes (summary trees' branches or segments), and the u16 numbers of branches asked for.

    >>> decode_hashes(encode_hashes([1, 2**64 - 1]))
    [1, 18446744073709551615]
    """
    values = array("Q", hashes)
    if sys.byteorder == "little":
        values.byteswap()
    return values.tobytes()


def decode_hashes(payload: bytes) -> list[int]:
    if len(payload) % 8:
        raise WireError(f"hash payload of {len(payload)} bytes is not a whole number of u64")
    values = array("Q", payload)
    if sys.byteorder == "little":
        values.byteswap()
    return values.tolist()


def encode_numbers(numbers: Iterable[int]) -> bytes:
    """u16 numbers: the branches a SEGMENTS call asks for."""
    return b"".join(_U16.pack(number) for number in numbers)


def decode_numbers(payload: bytes) -> list[int]:
    if len(payload) % 2:
        raise WireError(f"number payload of {len(payload)} bytes is not a whole number of u16")
    return [number for (number,) in _U16.iter_unpack(payload)]


def encode_list_request(cursor: bytes, segments: bytes) -> bytes:
    """A LIST call's record: list keys after ``cursor`` (b"": from the first) in the segments whose bits
    are set in ``segments`` (a bitmap, bit i of byte i // 8 for segment i)."""
    return _U16.pack(len(cursor)) + cursor + segments


def decode_list_request(record: bytes) -> tuple[bytes, bytes]:
    if len(record) < _U16.size:
        raise WireError("LIST request shorter than its cursor length")
    (length,) = _U16.unpack_from(record)
    end = _U16.size + length
    if len(record) < end:
        raise WireError("LIST request's cursor runs past its end")
    return record[_U16.size : end], record[end:]


def encode_listing(next_cursor: bytes, entries: Iterable[tuple[bytes, int]]) -> bytes:
    """A page of (key, version digest) and the cursor to ask the next page from (b"": the last page).

    >>> decode_listing(encode_listing(b"k2", [(b"k1", 7)]))
    (b'k2', [(b'k1', 7)])
    """
    parts = [_U16.pack(len(next_cursor)), next_cursor]
    for key, digest in entries:
        parts.append(_ENTRY.pack(len(key), digest))
        parts.append(key)
    return b"".join(parts)


def decode_listing(payload: bytes) -> tuple[bytes, list[tuple[bytes, int]]]:
    cursor, offset = decode_list_request(payload)[0], _U16.size
    offset += len(cursor)
    entries = []
    while offset < len(payload):
        if len(payload) - offset < _ENTRY.size:
            raise WireError("listing ends inside an entry header")
        length, digest = _ENTRY.unpack_from(payload, offset)
        offset += _ENTRY.size
        if offset + length > len(payload):
            raise WireError("listing's key runs past its end")
        entries.append((payload[offset : offset + length], digest))
        offset += length
    return cursor, entries


def decode_calls(frame: bytes, limits: Limits | None = None) -> list[CallRequest]:
    """The calls in a frame, in one pass (a replica decodes every call it is sent); with ``limits``, a
    frame breaking them raises WireError."""
    ops, max_calls = (frozenset(), sys.maxsize) if limits is None else (limits.ops, limits.max_calls)
    calls: list[CallRequest] = []
    offset, size = 0, len(frame)
    while offset < size:
        if size - offset < _CALL_SIZE:
            raise WireError("frame ends inside a message header")
        length, call_id, op, key_len = _unpack_call(frame, offset)
        end, key_end = offset + 4 + length, offset + _CALL_SIZE + key_len
        if end > size or length < _CALL_SIZE - 4:
            raise WireError("message length does not fit the frame")
        if len(calls) == max_calls:  # named with the frame's every call, once its framing is good
            raise WireError(f"frame carries {len(_messages(frame, _CALL_SIZE))} calls, more than {max_calls}")
        if key_end > end:
            raise WireError("key runs past the end of its message")
        kind = _OPS.get(op)
        if kind is None or (ops and kind not in ops):
            raise WireError(f"unknown op {op}")  # or not one of the channel's protocol version
        if limits is not None:
            if not 0 < key_len <= MAX_KEY_BYTES and kind not in _KEYLESS:
                raise WireError(f"key of {key_len} bytes (1 to {MAX_KEY_BYTES} allowed)")
            if end - key_end > limits.max_record and (
                kind is not Op.FORWARD or end - key_end > limits.max_record + MAX_FORWARD_HEADER
            ):
                raise WireError(f"record of {end - key_end} bytes, more than {limits.max_record}")
        # What CallRequest's own __new__ does, without a Python-level call per call.
        calls.append(
            _new_tuple(CallRequest, (call_id, kind, frame[key_end - key_len : key_end], frame[key_end:end]))
        )
        offset = end
    return calls


def decode_replies(frame: bytes) -> list[ReplicaReply]:
    """The replies in a frame, in one pass (a coordinator decodes every reply it is sent)."""
    replies: list[ReplicaReply] = []
    offset, size, header = 0, len(frame), _REPLY.size
    while offset < size:
        if size - offset < header:
            raise WireError("frame ends inside a message header")
        length, call_id, status = _unpack_reply(frame, offset)
        end = offset + 4 + length
        if end > size or length < header - 4:
            raise WireError("message length does not fit the frame")
        kind = _STATUSES.get(status)
        if kind is None:
            raise WireError(f"unknown status {status}")
        # What ReplicaReply's own __new__ does, without a Python-level call per reply.
        replies.append(_new_tuple(ReplicaReply, (call_id, kind, frame[offset + header : end])))
        offset = end
    return replies


def _messages(frame: bytes, header_size: int) -> list[tuple[int, int]]:
    """(start, end) of each length-prefixed message in a frame."""
    spans = []
    offset, size = 0, len(frame)
    while offset < size:
        if size - offset < header_size:
            raise WireError("frame ends inside a message header")
        end = offset + 4 + int.from_bytes(frame[offset : offset + 4], "big")
        if end > size or end < offset + header_size:
            raise WireError("message length does not fit the frame")
        spans.append((offset, end))
        offset = end
    return spans
