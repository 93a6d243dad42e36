"""One repair of this node with one peer, as a pure state machine: no I/O, driven step by step.

    BRANCHES ──> SEGMENTS ──> LISTING ⇄ RECORDS ──> DONE          (any step ──> FAILED)
         └──────────┴── trees equal ─────────────────┘

1. BRANCHES: the driver asks the peer for its tree's branch hashes (its tree for this node) and hands them
   over; equal trees end the exchange.
2. SEGMENTS: the segment hashes of the branches that differ; equal ones end it.
3. LISTING: both sides list the keys (with a digest of their version) of the next round of differing
   segments, page by page: the peer by LIST calls, this node from its own store.
4. RECORDS: the keys whose digests differ, or that one side lacks, are moved: pushed where only this node
   lists the key, and otherwise fetched: the peer's version is read, and the newer of it and this node's
   goes to the side that lacks it (a version may be on a side's list or not depending on its ``copies``,
   so a key only the peer lists may still be newer here). Then the next round of segments, or DONE.

Nothing of an exchange is durable but its outcome: the driver records a completed exchange
(kvnode.storage.system_db.RepairMarks) only at DONE, so a crash at any step leaves no trace and the next
exchange starts over; moving a record twice is harmless, since the newest version wins wherever it lands.

>>> from kvnode.healing.summary import SegmentTree
>>> ours, theirs = SegmentTree(), SegmentTree()
>>> ours.toggle(5, 0xABC)
>>> exchange = Exchange("http://b:1", ours)
>>> exchange.branches_answered(theirs.branches); exchange.step.name, exchange.branches
('SEGMENTS', [0])
>>> exchange.segments_answered(theirs.segment_hashes([0])); exchange.step.name, exchange.round
('LISTING', [5])
>>> exchange.their_page(b"", []); exchange.my_page(b"", [(b"k", 0xABC)]); exchange.step.name
'RECORDS'
>>> exchange.moves()
Moves(push=[b'k'], fetch=[])
>>> exchange.moved(); exchange.step.name
'DONE'
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kvnode.healing.summary import SEGMENTS, SegmentTree

__all__ = ["SEGMENTS_PER_ROUND", "Exchange", "ImpossibleStep", "Moves", "Step"]

# Segments listed and moved together: a bound on the keys held in memory at once (a quarter of the
# keyspace), at the price of walking the keys once per round when everything differs (a rebuild).
SEGMENTS_PER_ROUND = 1024


class Step(enum.Enum):
    BRANCHES = "branches"
    SEGMENTS = "segments"
    LISTING = "listing"
    RECORDS = "records"
    DONE = "done"
    FAILED = "failed"


class ImpossibleStep(RuntimeError):
    """An answer fed to an exchange in a step that does not expect it: a bug in the driver."""


class Moves(NamedTuple):
    push: list[bytes]  # only this node lists the key: send its version
    fetch: list[bytes]  # the peer lists a version this node does not: read it, the newer one wins


@dataclass
class Exchange:
    peer: str
    ours: SegmentTree  # this node's tree for the peer, as it was when the exchange started
    step: Step = Step.BRANCHES
    branches: list[int] = field(default_factory=list)  # the branches that differ
    pending: list[int] = field(default_factory=list)  # differing segments of rounds still to come
    round: list[int] = field(default_factory=list)  # the segments of this round
    their_cursor: bytes | None = b""  # where the peer's next page starts; None: listed
    my_cursor: bytes | None = b""
    theirs: dict[bytes, int] = field(default_factory=dict)  # key -> version digest, this round's
    mine: dict[bytes, int] = field(default_factory=dict)
    segments_compared: int = 0  # every segment, once the branches are: a branch's hash covers its segments
    segments_differing: int = 0
    failure: str = ""

    def branches_answered(self, theirs: Sequence[int]) -> None:
        self._expect(Step.BRANCHES)
        self.branches = self.ours.differing_branches(theirs)
        self.segments_compared = SEGMENTS
        self.step = Step.SEGMENTS if self.branches else Step.DONE

    def segments_answered(self, theirs: Sequence[int]) -> None:
        self._expect(Step.SEGMENTS)
        self.pending = self.ours.differing_segments(self.branches, theirs)
        self.segments_differing = len(self.pending)
        self._next_round()

    def their_page(self, cursor: bytes, entries: list[tuple[bytes, int]]) -> None:
        """A page of the peer's listing of this round's segments; cursor b"": its last."""
        self._check_page(self.their_cursor, "the peer's")
        self.theirs.update(entries)
        self.their_cursor = cursor or None
        self._listed()

    def my_page(self, cursor: bytes, entries: list[tuple[bytes, int]]) -> None:
        """A page of this node's own listing of this round's segments; cursor b"": its last."""
        self._check_page(self.my_cursor, "this node's")
        self.mine.update(entries)
        self.my_cursor = cursor or None
        self._listed()

    def _check_page(self, cursor: bytes | None, whose: str) -> None:
        self._expect(Step.LISTING)
        if cursor is None:
            raise ImpossibleStep(f"a page of {whose} listing after its last")

    def moves(self) -> Moves:
        """What this round must move."""
        self._expect(Step.RECORDS)
        mine, theirs = self.mine, self.theirs
        return Moves(
            push=[key for key in mine if key not in theirs],
            fetch=[key for key, digest in theirs.items() if mine.get(key) != digest],
        )

    def moved(self) -> None:
        """This round's records were moved: on to the next round, or done."""
        self._expect(Step.RECORDS)
        self._next_round()

    def fail(self, reason: str) -> None:
        self.failure = reason
        self.step = Step.FAILED

    def _next_round(self) -> None:
        self.theirs, self.mine = {}, {}
        if not self.pending:
            self.round = []
            self.step = Step.DONE
            return
        self.round = self.pending[:SEGMENTS_PER_ROUND]
        del self.pending[:SEGMENTS_PER_ROUND]
        self.their_cursor = self.my_cursor = b""
        self.step = Step.LISTING

    def _listed(self) -> None:
        if self.their_cursor is None and self.my_cursor is None:
            self.step = Step.RECORDS

    def _expect(self, step: Step) -> None:
        if self.step is not step:
            raise ImpossibleStep(f"exchange with {self.peer} is at {self.step.value}, not {step.value}")
