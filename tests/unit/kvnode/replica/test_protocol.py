"""kvnode.replica.protocol: the version two ends agree on (the highest both speak, or a refusal), what a
node speaks when pinned, the ops each version carries, and how a write travels at each version; the table
answers every op only with the statuses that carry an answer (the failing ones fail any call), and each
resolves what the server encodes for it. Pure."""

from __future__ import annotations

import pytest

from kvnode.replica import wire
from kvnode.replica.protocol import (
    CURRENT_VERSION,
    MIN_VERSION,
    PROTOCOL,
    Versions,
    negotiate,
    ops_of,
    spoken,
    write_call,
)
from kvnode.storage.records import Record, decode, encode

FAILING = {wire.Status.FAILED, wire.Status.REFUSED, wire.Status.NOT_READY}


@pytest.mark.parametrize(
    ("ours", "theirs", "agreed"),
    [
        (Versions(1, 2), Versions(1, 2), 2),  # two upgraded nodes
        (Versions(1, 2), Versions(1, 1), 1),  # beside one not yet upgraded (or pinned)
        (Versions(1, 1), Versions(1, 2), 1),
        (Versions(1, 3), Versions(2, 5), 3),
        (Versions(2, 2), Versions(2, 3), 2),
        (Versions(3, 3), Versions(1, 3), 3),
        (Versions(2, 2), Versions(1, 1), None),  # a node that dropped 1, beside one that speaks only 1
        (Versions(1, 1), Versions(2, 3), None),
        (Versions(4, 6), Versions(1, 3), None),
    ],
)
def test_two_ends_use_the_highest_version_both_speak_or_none(
    ours: Versions, theirs: Versions, agreed: int | None
) -> None:
    assert negotiate(ours, theirs) == agreed
    assert negotiate(theirs, ours) == agreed  # both ends reach the same answer on their own


def test_a_node_speaks_every_version_unless_pinned_below_the_newest() -> None:
    assert spoken() == spoken(0) == Versions(MIN_VERSION, CURRENT_VERSION)
    assert spoken(1) == Versions(MIN_VERSION, 1)
    for outside in (-1, CURRENT_VERSION + 1):
        with pytest.raises(ValueError, match="maximum protocol version"):
            spoken(outside)


def test_version_1_has_every_op_but_delete_and_the_current_one_has_them_all() -> None:
    assert ops_of(1) == set(wire.Op) - {wire.Op.DELETE}
    assert ops_of(CURRENT_VERSION) == set(wire.Op) == set(PROTOCOL)


def test_a_tombstone_travels_as_a_delete_from_version_2_and_anything_else_as_a_write() -> None:
    tombstone = Record.delete(7, copies=2)
    op, key, record = write_call(b"k", tombstone, 1)
    assert (op, key, decode(record)) == (wire.Op.WRITE, b"k", tombstone)
    op, key, record = write_call(b"k", tombstone, 2)
    assert (op, key, wire.decode_delete(record)) == (wire.Op.DELETE, b"k", tombstone)
    for version in (1, 2):
        for other in (Record.put(7, b"v"), Record.put(7, b"v", ttl_us=5)):
            op, _, record = write_call(b"k", other, version)
            assert (op, decode(record)) == (wire.Op.WRITE, other)


def test_every_op_has_an_entry_and_no_entry_answers_with_a_failing_status() -> None:
    assert set(PROTOCOL) == set(wire.Op)
    for op, answers in PROTOCOL.items():
        assert answers, op
        assert not FAILING & set(answers), op


def test_each_answer_resolves_what_the_server_encodes() -> None:
    record = Record(5, False, b"v")
    for op in (wire.Op.READ, wire.Op.FETCH):
        assert PROTOCOL[op][wire.Status.FOUND](encode(record)) == record
        assert PROTOCOL[op][wire.Status.ABSENT](b"") is None
    assert PROTOCOL[wire.Op.WRITE][wire.Status.NEWER](wire.encode_timestamp(42)) == 42
    assert PROTOCOL[wire.Op.WRITE][wire.Status.STORED](b"") is None
    assert PROTOCOL[wire.Op.CLOCK][wire.Status.CLOCK](wire.encode_clock(9, "serving")) == (9, "serving")
    assert PROTOCOL[wire.Op.ADOPT][wire.Status.STORED](b"") is None
    # The repair, membership and scan calls hand their payloads on, decoded by their callers.
    for op, status in [
        (wire.Op.BRANCHES, wire.Status.HASHES),
        (wire.Op.SEGMENTS, wire.Status.HASHES),
        (wire.Op.LIST, wire.Status.LISTING),
        (wire.Op.MEMBERSHIP, wire.Status.MEMBERSHIP),
        (wire.Op.SCAN, wire.Status.RECORDS),
    ]:
        assert PROTOCOL[op][status](b"payload") == b"payload"
