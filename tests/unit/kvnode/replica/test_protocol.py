"""kvnode.replica.protocol: the table answers every op only with the statuses that carry an answer (the
failing ones fail any call), and each resolves what the server encodes for it."""

from __future__ import annotations

from kvnode.replica import wire
from kvnode.replica.protocol import PROTOCOL
from kvnode.storage.records import Record, encode

FAILING = {wire.Status.FAILED, wire.Status.REFUSED, wire.Status.NOT_READY}


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
