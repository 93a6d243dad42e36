"""Paxos ballots: unique to the node that makes one, totally ordered, above every ballot the node saw.

A ballot is (micros, node): a reading of the node's hybrid clock (kvnode.clocks.hybrid, microseconds)
and a 64-bit tiebreak derived from the node's URL, so two nodes never make the same ballot, and ballots
order by time first, as Cassandra's time-based ballots do. ``ZERO_BALLOT`` is below every ballot a node
makes: an acceptor that promised nothing has promised it.

>>> node = node_tiebreak("http://a:8080")
>>> first = next_ballot(1_000, node, ZERO_BALLOT)
>>> first.micros, first > ZERO_BALLOT
(1000, True)
>>> seen = Ballot(5_000, node_tiebreak("http://b:8080"))   # another node's, from a rejection
>>> next_ballot(1_001, node, above=seen).micros                # above it, whatever the clock says
5001
>>> decode_ballot(encode_ballot(first)) == first, len(encode_ballot(first))
(True, 16)

What keeps one node's ballots unique is the clock reading: each must be new. The driver first moves its
hybrid clock past the ballot to beat (``clock.observe(above.micros)``) and then reads ``clock.now()``,
which never repeats, persists its floor before handing out a reading past it (so a restarted node never
reuses a ballot it sent before a crash), and is then above ``above`` already. ``next_ballot`` adds the
``above.micros + 1`` fallback only for a ballot further ahead than the clock's maximum skew, which the
clock refuses to observe.
"""

from __future__ import annotations

import hashlib
import struct
from typing import NamedTuple

__all__ = [
    "BALLOT_BYTES",
    "ZERO_BALLOT",
    "Ballot",
    "decode_ballot",
    "encode_ballot",
    "next_ballot",
    "node_tiebreak",
]

_BALLOT = struct.Struct(">QQ")
BALLOT_BYTES = _BALLOT.size


class Ballot(NamedTuple):
    """Field order is the ballots' order: by clock reading, then by node."""

    micros: int  # the proposing node's hybrid clock reading
    node: int  # the proposing node's tiebreak (node_tiebreak)

    def __str__(self) -> str:  # compact for reasons and logs: micros.node in hex
        return f"{self.micros}.{self.node:016x}"


ZERO_BALLOT = Ballot(0, 0)


def node_tiebreak(url: str) -> int:
    """The 64-bit tiebreak of the node at ``url``: the same on every node, different for two nodes (a
    collision between two members' URLs is a 2**-64 chance)."""
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8).digest(), "big")


def next_ballot(now_us: int, node: int, above: Ballot) -> Ballot:
    """This node's ballot at clock reading ``now_us``, above ``above`` (the highest ballot seen)."""
    return Ballot(max(now_us, above.micros + 1), node)


def encode_ballot(ballot: Ballot) -> bytes:
    return _BALLOT.pack(*ballot)


def decode_ballot(data: bytes | memoryview, offset: int = 0) -> Ballot:
    """The ballot at ``offset`` of ``data``; ValueError if fewer than BALLOT_BYTES remain."""
    if len(data) - offset < BALLOT_BYTES:
        raise ValueError(f"a ballot needs {BALLOT_BYTES} bytes, {max(0, len(data) - offset)} left")
    return Ballot(*_BALLOT.unpack_from(data, offset))
