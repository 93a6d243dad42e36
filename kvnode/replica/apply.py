"""The one way a replica stores a version it is given, whoever sends it (a client write's fan-out, read
repair, a hint, anti-entropy, a membership change's stream): judged against the clock fence (a version
stamped beyond the maximum skew is refused, never stored), then written only if newer than the one held.
This node's storage as a replica (kvnode.replica.local) and the answers to peers' calls
(kvnode.replica.storage_calls) both store through :func:`apply_record`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from kvnode.clocks.fence import ClockFence, beyond_skew
from kvnode.storage.records import Record

__all__ = ["Applied", "apply_record"]


class Applied(NamedTuple):
    """What storing a version did: ``refused`` says why it was not stored (beyond the skew), else
    ``newer`` is the timestamp of a newer version already held (None: this one is stored)."""

    refused: str = ""
    newer: int | None = None


def apply_record(
    store: Callable[[bytes, Record, bytes | None], Record],
    fence: ClockFence,
    key: bytes,
    record: Record,
    encoded: bytes | None = None,
) -> Applied:
    """Store ``record`` at ``key`` by ``store`` (Storage.apply, or Storage.offer for the event-loop
    iteration's group commit) unless refused or older than what is held; raises the store's StorageError
    (StorageFull when the disk is full). ``encoded``: the record's bytes, when the caller has them."""
    if not fence.acceptable(record.timestamp):
        return Applied(refused=beyond_skew(record.timestamp))
    held = store(key, record, encoded)
    return _STORED if held == record else Applied(newer=held.timestamp)


_STORED = Applied()  # built once: nearly every version a replica is given is stored
