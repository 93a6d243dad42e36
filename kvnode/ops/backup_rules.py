"""The pure parts of ``admin backup`` and ``admin restore`` (kvnode.ops.backup): the merge of the members'
version streams, what a backup's manifest says and how it is checked, and which backed-up versions a
restore may write without bringing a deleted key back. No I/O.

A backup merges every member's versions by key (each stream in key order, one frame of each at a time)
and keeps each key's newest version, as a read of every replica would::

    >>> from kvnode.storage.records import Record, encode
    >>> a = [(b"k1", encode(Record.put(5, b"old"))), (b"k2", encode(Record.delete(9)))]
    >>> b = [(b"k1", encode(Record.put(7, b"new")))]
    >>> [(key, decode(raw).value) for key, raw in merge_newest([a, b])]
    [(b'k1', b'new'), (b'k2', b'')]

A restore writes a version with its own timestamp, so last-write-wins keeps any version written since the
backup. The danger is a key deleted since the backup whose tombstone is gone (tombstone GC drops one
older than the gc grace period): the backed-up version would come back. So a version is written outright
only when that cannot be: into another cluster than the backup's (it never held these keys), or when the
version is younger than the grace period (a later tombstone is still kept), or when the operator says
the backup is the truth (``--authoritative``). Any other is written only where its key still has a
version in the cluster (the node reads it first, and the newer version wins); where no owner holds the
key it is skipped::

    >>> rule = RestoreRule(same_cluster=True, grace_us=100, authoritative=False)
    >>> rule.way(Record.put(950, b"v"), now_us=1_000), rule.way(Record.put(850, b"v"), now_us=1_000)
    (<Way.YOUNG: 'younger than the gc grace period'>, <Way.IF_HELD: 'only where the cluster holds the key'>)
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from kvnode.storage.records import Record, decode

__all__ = [
    "FORMAT",
    "BadBackup",
    "Counts",
    "RestoreRule",
    "Way",
    "check_manifest",
    "merge_newest",
]

FORMAT = 1  # the backup format: a later kvnode that changes it refuses what it cannot read
_MANIFEST_FIELDS = {
    "format": int,
    "cluster_id": str,
    "members": list,
    "newest_timestamp_us": int,
    "taken_at": str,
    "counts": dict,
    "versions_bytes": int,
    "versions_sha256": str,
}
_COUNT_FIELDS = ("keys", "values", "tombstones", "expired")


class BadBackup(ValueError):
    """A backup that cannot be restored: the message says why, in one line."""


class OutOfOrder(ValueError):
    """A member's versions did not come in key order."""


def merge_newest(streams: Iterable[Iterable[tuple[bytes, bytes]]]) -> Iterator[tuple[bytes, bytes]]:
    """Each key of the (key, encoded record) streams once, in key order, with its newest version (records
    order versions: the greater is the newer). Each stream must be in key order (OutOfOrder
    otherwise); one item of each is held at a time."""
    merged = heapq.merge(*streams, key=itemgetter(0))
    previous: bytes | None = None
    for key, versions in itertools.groupby(merged, key=itemgetter(0)):
        if previous is not None and key <= previous:
            raise OutOfOrder(f"key {key[:60]!r} came after {previous[:60]!r}")
        previous = key
        yield key, max((raw for _, raw in versions), key=decode)


@dataclass(slots=True)
class Counts:
    """What a backup holds, by kind of version (judged at ``now_us``: an expired value is not live)."""

    keys: int = 0
    values: int = 0  # live values
    tombstones: int = 0
    expired: int = 0
    newest_timestamp_us: int = 0

    def add(self, record: Record, now_us: int) -> None:
        self.keys += 1
        if record.tombstone:
            self.tombstones += 1
        elif record.expired_at(now_us):
            self.expired += 1
        else:
            self.values += 1
        self.newest_timestamp_us = max(self.newest_timestamp_us, record.timestamp)

    def to_json(self) -> dict[str, int]:
        return {field: getattr(self, field) for field in _COUNT_FIELDS}


def check_manifest(manifest: object) -> Mapping[str, Any]:
    """The manifest if it is one this kvnode can restore; BadBackup (one line) otherwise."""
    if not isinstance(manifest, dict):
        raise BadBackup("the manifest is not a JSON object")
    for field, kind in _MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(field), kind):
            raise BadBackup(f"the manifest has no {field!r} of type {kind.__name__}")
    if manifest["format"] != FORMAT:
        raise BadBackup(f"the backup has format {manifest['format']}; this kvnode restores format {FORMAT}")
    counts = manifest["counts"]
    if not all(isinstance(counts.get(field), int) for field in _COUNT_FIELDS):
        raise BadBackup(f"the manifest's counts lack one of {', '.join(_COUNT_FIELDS)}")
    return manifest


class Way(enum.Enum):
    """How a restore writes a backed-up version, and why."""

    NEW_CLUSTER = "into another cluster than the backup's"
    YOUNG = "younger than the gc grace period"
    AUTHORITATIVE = "--authoritative"
    IF_HELD = "only where the cluster holds the key"


@dataclass(frozen=True, slots=True)
class RestoreRule:
    """The rule for one restore: whether the target is the backup's own cluster, its gc grace period (the
    least time a tombstone is kept), and whether the operator made the backup the truth."""

    same_cluster: bool
    grace_us: int
    authoritative: bool

    def way(self, record: Record, *, now_us: int) -> Way:
        """How ``record`` may be written at ``now_us``, the target cluster's time."""
        if not self.same_cluster:
            return Way.NEW_CLUSTER
        # A key deleted after this version has a tombstone newer than it, kept at least the grace period
        # from its own timestamp: while this version is younger than that, the tombstone is still there.
        if now_us - record.timestamp < self.grace_us:
            return Way.YOUNG
        if self.authoritative:
            return Way.AUTHORITATIVE
        return Way.IF_HELD
