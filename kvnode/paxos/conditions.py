"""ETags naming versions, and the conditions a conditional write puts on them (``If-Match``,
``If-None-Match``), parsed from their headers and judged against a key's current version.

An ETag names a version (kvnode.storage.records.Record): the same on every node for the same version,
different for different ones. It is the version's timestamp and a 64-bit digest of what a client reads
of it (tombstone, value, expiry), in hex, so it is computed from the record alone, by any node::

    >>> from kvnode.storage.records import Record
    >>> etag(Record.put(0x5F, b"v"))
    '000000000000005f954d9c2fc92f70ef'
    >>> etag(Record.put(0x5F, b"v")) == etag(Record.put(0x5F, b"v", copies=2))   # copies is not in it
    True
    >>> etag(Record.put(0x5F, b"v")) != etag(Record.put(0x5F, b"w")) != etag(Record.delete(0x5F))
    True
    >>> quoted_etag(Record.delete(1))
    '"0000000000000001e9d9775830ae5db7"'

``copies`` (how many replicas a plain write with ``from`` went to) is left out: it is placement, not
content, and anti-entropy may hold the same write with two counts on two replicas for a while, so an
ETag read from one and the version a round reads from others would disagree about the same write (a
needless 412). A conditional write never sets it (``from`` with a condition is a 400).

A condition comes from the request's headers: ``If-Match: "V"`` holds when the key's newest version,
a tombstone or an expired version included, is V; ``If-None-Match: *`` when the key has no live value
(absent, a tombstone, or expired at the instant it is judged)::

    >>> condition = parse_condition(if_match=quoted_etag(Record.put(7, b"v")), if_none_match=None)
    >>> holds(condition, Record.put(7, b"v"), now_us=10), holds(condition, Record.put(8, b"v"), now_us=10)
    (True, False)
    >>> creating = parse_condition(if_match=None, if_none_match="*")
    >>> holds(creating, None, 10), holds(creating, Record.put(7, b"v", ttl_us=2), now_us=10)
    (True, True)
    >>> parse_condition(if_match="W/\\"x\\"", if_none_match=None)
    Traceback (most recent call last):
    ...
    kvnode.paxos.conditions.MalformedCondition: If-Match takes a strong ETag, not a weak one (W/)
"""

from __future__ import annotations

import hashlib
import re
import struct
from typing import NamedTuple

from kvnode.storage.records import Record

__all__ = [
    "Condition",
    "IfAbsent",
    "IfMatch",
    "MalformedCondition",
    "etag",
    "holds",
    "parse_condition",
    "quoted_etag",
]

_CONTENT = struct.Struct(">BQ")  # tombstone, expiry: what the digest covers besides the value
_ETAG = re.compile(r"[0-9a-f]{32}")


class MalformedCondition(ValueError):
    """A condition header that cannot be read; its message is the one-line reason a 400 gives."""


def etag(record: Record) -> str:
    """The ETag of ``record``, unquoted: 16 hex digits of its timestamp, 16 of its content's digest."""
    return quoted_etag(record)[1:-1]


def quoted_etag(record: Record) -> str:
    """The ``ETag`` header's value for ``record``: its ETag quoted, made in one go (every answer to a
    client has one)."""
    digest = hashlib.blake2b(_CONTENT.pack(record.tombstone, record.expires), digest_size=8)
    digest.update(record.value)
    return f'"{record.timestamp:016x}{digest.hexdigest()}"'


class IfMatch(NamedTuple):
    """``If-Match: "V"``: the key's newest version, a tombstone included, is V."""

    etag: str  # unquoted


class IfAbsent(NamedTuple):
    """``If-None-Match: *``: the key has no live value."""


Condition = IfMatch | IfAbsent


def parse_condition(if_match: str | None, if_none_match: str | None) -> Condition | None:
    """The condition the two headers' values state (None: neither header is there), or
    MalformedCondition with the reason."""
    if if_match is not None and if_none_match is not None:
        raise MalformedCondition("If-Match and If-None-Match together: a conditional write takes one")
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise MalformedCondition("If-None-Match takes only *")
        return IfAbsent()
    if if_match is None:
        return None
    value = if_match.strip()
    if value.startswith("W/"):
        raise MalformedCondition("If-Match takes a strong ETag, not a weak one (W/)")
    if value == "*":
        raise MalformedCondition('If-Match takes one ETag such as "V", not *')
    if "," in value:
        raise MalformedCondition("If-Match takes exactly one ETag")
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        raise MalformedCondition('If-Match takes an ETag in double quotes, such as "V"')
    tag = value[1:-1]
    if not _ETAG.fullmatch(tag):
        raise MalformedCondition("If-Match names no version: not an ETag this store gives")
    return IfMatch(tag)


def holds(condition: Condition | None, current: Record | None, now_us: int) -> bool:
    """Whether ``condition`` holds for the key's newest version ``current`` (None: none) at ``now_us``,
    the instant an expiry is judged at. No condition always holds."""
    if condition is None:
        return True
    if isinstance(condition, IfAbsent):
        return current is None or current.absent_at(now_us)
    return current is not None and etag(current) == condition.etag
