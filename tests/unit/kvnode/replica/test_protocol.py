"""kvnode.replica.protocol: the version two ends agree on (the highest both speak, or a refusal), what a
node speaks when pinned, the ops each version carries, and how a write travels at each version. Pure."""

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
from kvnode.storage.records import Record, decode


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
