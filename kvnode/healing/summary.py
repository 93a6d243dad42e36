"""A summary of the versions a node holds, for anti-entropy: one hash tree per peer. Pure: no I/O.

The keyspace is cut into ``SEGMENTS`` segments by a hash of the key. A segment's hash is the XOR of a
digest of every (key, version) in it, and a branch's the XOR of its segments' ("tictac" trees, as Riak
3's anti-entropy keeps them): storing a new version of a key changes the tree by XORing out the old
version's digest and in the new one's, with no scan. Two replicas whose trees for each other are equal
hold the same versions of their shared keys; where they differ, only the differing branches' segments,
then only those segments' keys, need to be compared.

A node keeps a tree per peer, over the keys this node holds that the peer should hold too: the keys whose
owners (kvnode.topology.placement: the first N of a key's order, N the replication factor, for a record
written with the default ``copies`` 0; the first ``copies`` for one written to fewer) include both. When
every member owns every key (N = the member count), records on every owner go into one tree shared by all
peers, so the default write path updates one tree, not one per peer.

>>> from kvnode.storage.records import Record, encode
>>> placement = Placement(["http://a:1", "http://b:1", "http://c:1"])
>>> a, b = Summaries("http://a:1", placement), Summaries("http://b:1", placement)
>>> v1 = encode(Record.put(1, b"v1"))
>>> a.changed(b"k", None, v1); b.changed(b"k", None, v1)
>>> a.tree_for("http://b:1") == b.tree_for("http://a:1")
True
>>> a.changed(b"k", v1, encode(Record.put(2, b"v2")))     # a newer version on a only
>>> diff = a.tree_for("http://b:1").differing_branches(b.tree_for("http://a:1").branches)
>>> a.tree_for("http://b:1").differing_segments(diff, b.tree_for("http://a:1").segment_hashes(diff))
[1885]
>>> key_segment(b"k")
1885
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Iterable, Sequence
from hashlib import blake2b

from kvnode.storage.records import COPIES_FLAG, FLAGS_AT, copies_of
from kvnode.topology.placement import Placement

__all__ = [
    "BRANCHES",
    "SEGMENTS",
    "SEGMENTS_PER_BRANCH",
    "SegmentTree",
    "Summaries",
    "key_segment",
    "version_digest",
]

SEGMENTS_PER_BRANCH = 64
BRANCHES = 64
SEGMENTS = BRANCHES * SEGMENTS_PER_BRANCH  # 4096: with a million keys, a segment lists about 250
_BRANCH_SHIFT = SEGMENTS_PER_BRANCH.bit_length() - 1
_HASH_BYTES = 8


_SEGMENT_MASK = SEGMENTS - 1  # SEGMENTS is a power of two


def key_segment(key: bytes) -> int:
    """The segment a key belongs to, the same on every node. CRC-32 spreads keys evenly and costs a
    sixth of a cryptographic hash; only the digests below need to be hard to make collide."""
    return zlib.crc32(key) & _SEGMENT_MASK


def version_digest(key: bytes, record: bytes) -> int:
    """A 64-bit digest of one key's stored version (its encoded record bytes, value included). A record
    starts with its 8-byte timestamp, so no key and record run together into another pair's bytes.
    Cryptographic, not a CRC: a linear hash would let two differences cancel in a segment's XOR."""
    return int.from_bytes(blake2b(key + record, digest_size=_HASH_BYTES).digest(), "big")


class SegmentTree:
    """Segment hashes and, above them, branch hashes; each the XOR of the digests below it."""

    __slots__ = ("branches", "segments")

    def __init__(self) -> None:
        self.segments = array("Q", bytes(_HASH_BYTES * SEGMENTS))
        self.branches = array("Q", bytes(_HASH_BYTES * BRANCHES))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentTree) and self.segments == other.segments

    __hash__ = None  # type: ignore[assignment]  # mutable

    def toggle(self, segment: int, digest: int) -> None:
        """XOR a version's digest in (a version added) or out (a version replaced or dropped)."""
        self.segments[segment] ^= digest
        self.branches[segment >> _BRANCH_SHIFT] ^= digest

    def merged(self, other: SegmentTree) -> SegmentTree:
        """A new tree, this one XOR other: the versions of both (they hold no version in common)."""
        tree = SegmentTree()
        tree.segments = array("Q", (a ^ b for a, b in zip(self.segments, other.segments, strict=True)))
        tree.branches = array("Q", (a ^ b for a, b in zip(self.branches, other.branches, strict=True)))
        return tree

    def differing_branches(self, theirs: Sequence[int]) -> list[int]:
        """The branches whose hashes differ from ``theirs`` (another tree's ``branches``)."""
        return [branch for branch, (a, b) in enumerate(zip(self.branches, theirs, strict=True)) if a != b]

    def segment_hashes(self, branches: Iterable[int]) -> list[int]:
        """The hashes of every segment of ``branches``, branch by branch, in segment order."""
        hashes: list[int] = []
        for branch in branches:
            start = branch * SEGMENTS_PER_BRANCH
            hashes.extend(self.segments[start : start + SEGMENTS_PER_BRANCH])
        return hashes

    def differing_segments(self, branches: Sequence[int], theirs: Sequence[int]) -> list[int]:
        """The segments of ``branches`` whose hashes differ from ``theirs`` (the other tree's
        ``segment_hashes(branches)``)."""
        ours = self.segment_hashes(branches)
        if len(theirs) != len(ours):
            raise ValueError(f"{len(theirs)} segment hashes for {len(branches)} branches")
        segments = [
            branch * SEGMENTS_PER_BRANCH + offset
            for branch in branches
            for offset in range(SEGMENTS_PER_BRANCH)
        ]
        return [segment for segment, a, b in zip(segments, ours, theirs, strict=True) if a != b]

    def to_bytes(self) -> bytes:
        return self.segments.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> SegmentTree:
        if len(data) != _HASH_BYTES * SEGMENTS:
            raise ValueError(f"a tree is {_HASH_BYTES * SEGMENTS} bytes, got {len(data)}")
        tree = cls()
        tree.segments = array("Q", data)
        for segment, digest in enumerate(tree.segments):
            tree.branches[segment >> _BRANCH_SHIFT] ^= digest
        return tree


class Summaries:
    """One node's trees, one per peer; ``changed`` keeps them current as records are stored."""

    def __init__(self, own_url: str, placement: Placement) -> None:
        self.own_url = own_url
        self.placement = placement
        self.peers = tuple(url for url in placement.nodes if url != own_url)
        self.common = SegmentTree()  # records on every member (copies 0, every member an owner)
        self._everyone = placement.everyone_owns
        self.partial = {peer: SegmentTree() for peer in self.peers}  # records written to fewer

    def changed(self, key: bytes, old: bytes | None, new: bytes | None) -> None:
        """Key's stored version went from ``old`` to ``new`` (encoded records; None: absent). On every
        stored write's path, so the common case (a version on every member) is written out inline."""
        segment = zlib.crc32(key) & _SEGMENT_MASK
        branch = segment >> _BRANCH_SHIFT
        common = self.common
        for record in (old, new):
            if record is None:
                continue
            digest = int.from_bytes(blake2b(key + record, digest_size=_HASH_BYTES).digest(), "big")
            if not self._everyone or (len(record) > FLAGS_AT and record[FLAGS_AT] & COPIES_FLAG):
                for peer in self._sharing(key, copies_of(record)):
                    self.partial[peer].toggle(segment, digest)
            else:
                common.segments[segment] ^= digest
                common.branches[branch] ^= digest

    def tree_for(self, peer: str) -> SegmentTree:
        """The tree of the keys this node holds that ``peer`` should hold too."""
        return self.common.merged(self.partial[peer])

    def shares(self, key: bytes, record: bytes, peer: str) -> bool:
        """Whether ``peer``'s tree covers this version: whether both this node and peer should hold it."""
        copies = copies_of(record)
        return (copies == 0 and self._everyone) or peer in self._sharing(key, copies)

    def _sharing(self, key: bytes, copies: int) -> list[str]:
        """The peers that, with this node, should hold a version written to ``copies`` replicas (0: the
        key's N owners); none when this node should not hold it itself (a copy that only repair of another
        kind will move)."""
        owners = self.placement.owners(key, copies)
        if self.own_url not in owners:
            return []
        return [url for url in owners if url != self.own_url]
