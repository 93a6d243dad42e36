"""What a replica call resolves to, from its reply: what the protocol table (kvnode.replica.protocol)
says the reply's status answers, or the named error (kvnode.replica.errors) that a failed, mismatched or
malformed reply stands for. Pure."""

from __future__ import annotations

from kvnode.replica import wire
from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaNotReady,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
)
from kvnode.replica.protocol import PROTOCOL
from kvnode.storage.keyspace import DISK_FULL
from kvnode.storage.records import CorruptRecord

__all__ = ["answer_of"]


def answer_of(url: str, op: wire.Op, reply: wire.ReplicaReply) -> tuple[ReplicaError | None, object]:
    """What a call to the peer at ``url`` ends in, from its reply: (None, the value it resolves to), or
    (the error it fails with, None)."""
    try:
        return None, _answer(op, reply)
    except CorruptRecord as error:
        return ReplicaProtocolError(f"{url}: malformed record in reply: {error}"), None
    except wire.WireError as error:
        return ReplicaProtocolError(f"{url}: {error}"), None
    except ReplicaRejected as error:
        return type(error)(f"{url}: {error}"), None


def _answer(op: wire.Op, reply: wire.ReplicaReply) -> object:
    """The value a reply answers; raises ReplicaRejected (or ReplicaDiskFull), ReplicaSkewRefused or
    ReplicaNotReady for a failed reply, wire.WireError for one that does not answer ``op``, and
    CorruptRecord for a record that does not decode."""
    status = reply.status
    if status is wire.Status.FAILED:
        reason = reply.payload.decode("utf-8", "replace")
        raise (ReplicaDiskFull if reason.startswith(DISK_FULL) else ReplicaRejected)(reason)
    if status is wire.Status.REFUSED:
        raise ReplicaSkewRefused(reply.payload.decode("utf-8", "replace"))
    if status is wire.Status.NOT_READY:
        raise ReplicaNotReady("its data is not whole yet (it rebuilds)")
    resolve = PROTOCOL[op].get(status)
    if resolve is not None:
        return resolve(reply.payload)
    raise wire.WireError(f"reply {status.name} does not answer a {op.name}")
