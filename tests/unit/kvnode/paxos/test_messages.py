"""kvnode.paxos.messages: every message through the codec, and every way bytes can fail to be one."""

from __future__ import annotations

import pytest

from kvnode.paxos.ballot import ZERO_BALLOT, Ballot
from kvnode.paxos.messages import (
    Accepted,
    Commit,
    Committed,
    Message,
    Prepare,
    Promise,
    Proposal,
    Propose,
    Refused,
    decode,
    decode_proposal,
    encode,
    encode_proposal,
)
from kvnode.storage.records import CorruptRecord, Record

B1, B2 = Ballot(100, 1), Ballot(2**64 - 1, 2**64 - 1)
P1 = Proposal(B1, Record.put(100, b"value", ttl_us=7, copies=2))


@pytest.mark.parametrize(
    "message",
    [
        Prepare(B1),
        Propose(P1),
        Propose(Proposal(B2, Record.delete(5))),
        Commit(P1),
        Promise(B1, None, ZERO_BALLOT),
        Promise(B1, P1, B2, Record.put(9, b"")),
        Promise(B1, P1, ZERO_BALLOT),
        Promise(B2, None, B1, Record.delete(3)),
        Accepted(B1),
        Committed(B2),
        Refused(B1, B2),
    ],
)
def test_each_message_decodes_as_it_was_encoded(message: Message) -> None:
    assert decode(encode(message)) == message


def test_propose_and_commit_are_told_apart_by_their_tag() -> None:
    assert encode(Propose(P1))[1:] == encode(Commit(P1))[1:] == encode_proposal(P1)
    assert decode_proposal(encode_proposal(P1)) == P1


PROMISE = encode(Promise(B1, P1, B2, Record.put(9, b"stored")))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x00", "unknown Paxos message tag 0"),
        (b"\x08" + bytes(16), "unknown Paxos message tag 8"),
        (encode(Prepare(B1))[:-1], "needs 16 bytes, has 15"),
        (encode(Accepted(B1)) + b"x", "needs 16 bytes, has 17"),
        (encode(Refused(B1, B2))[:-2], "needs 32 bytes"),
        (encode(Propose(P1))[:10], "a ballot needs 16 bytes"),
        (PROMISE[:20], "a promise needs at least 33 bytes"),
        (PROMISE[:33] + b"\x01", "has no length"),
        (PROMISE[:33] + b"\x08", "unknown flags"),
        (PROMISE[:40], "cut short"),
        (encode(Promise(B1, None, B2)) + b"x", "bytes after its fields"),
    ],
)
def test_bytes_that_are_no_message_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        decode(data)


def test_a_bad_record_inside_is_a_corrupt_record() -> None:
    with pytest.raises(CorruptRecord):
        decode(encode(Commit(P1))[: 1 + 16 + 5])  # a record cut inside its header
