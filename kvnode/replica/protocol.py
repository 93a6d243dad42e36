"""The replica protocol as one table (:data:`PROTOCOL`): for each call, the reply statuses that answer it,
each with what its payload resolves to (FAILED, REFUSED and NOT_READY fail any call: kvnode.replica.answers
says with which error). A peer resolves every reply by it (kvnode.replica.answers); the server
(kvnode.node.peer_api) has one answerer an entry and answers with one of its statuses. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kvnode.replica import wire
from kvnode.storage.records import decode

__all__ = ["PROTOCOL", "Answers"]


Answers = Mapping[wire.Status, Callable[[bytes], object]]  # a reply's status -> what its payload resolves to


def _nothing(payload: bytes) -> None:
    return None


def _payload(payload: bytes) -> bytes:
    return payload


_READ = {wire.Status.FOUND: decode, wire.Status.ABSENT: _nothing}

# The replica protocol, one entry a call: a peer resolves each reply by it (kvnode.replica.answers), and
# the server (kvnode.node.peer_api) has one answerer an entry, answering with one of its statuses.
PROTOCOL: dict[wire.Op, Answers] = {
    wire.Op.READ: _READ,
    wire.Op.FETCH: _READ,
    wire.Op.WRITE: {wire.Status.STORED: _nothing, wire.Status.NEWER: wire.decode_timestamp},
    wire.Op.CLOCK: {wire.Status.CLOCK: wire.decode_clock},
    wire.Op.BRANCHES: {wire.Status.HASHES: _payload},  # the key is the caller's URL
    wire.Op.SEGMENTS: {wire.Status.HASHES: _payload},
    wire.Op.LIST: {wire.Status.LISTING: _payload},
    wire.Op.MEMBERSHIP: {wire.Status.MEMBERSHIP: _payload},
    wire.Op.ADOPT: {wire.Status.STORED: _nothing},
    wire.Op.SCAN: {wire.Status.RECORDS: _payload},
}
