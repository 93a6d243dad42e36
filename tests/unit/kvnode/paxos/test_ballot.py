"""kvnode.paxos.ballot: order, uniqueness by node, the next ballot above one seen, and the codec."""

from __future__ import annotations

import pytest

from kvnode.paxos.ballot import (
    BALLOT_BYTES,
    ZERO_BALLOT,
    Ballot,
    decode_ballot,
    encode_ballot,
    next_ballot,
    node_tiebreak,
)


def test_ballots_order_by_clock_reading_then_by_node() -> None:
    assert ZERO_BALLOT < Ballot(1, 0) < Ballot(1, 5) < Ballot(2, 0)
    assert sorted([Ballot(2, 1), Ballot(1, 9), Ballot(2, 0)]) == [Ballot(1, 9), Ballot(2, 0), Ballot(2, 1)]


def test_a_nodes_tiebreak_is_stable_and_differs_between_nodes() -> None:
    urls = [f"http://10.0.0.{n}:8080" for n in range(200)]
    tiebreaks = {node_tiebreak(url) for url in urls}
    assert len(tiebreaks) == len(urls)
    assert node_tiebreak(urls[0]) == node_tiebreak(urls[0]) < 2**64


def test_the_next_ballot_follows_the_clock_and_is_above_the_ballot_seen() -> None:
    node = node_tiebreak("http://a:1")
    assert next_ballot(500, node, Ballot(400, 7)) == Ballot(500, node)
    assert next_ballot(500, node, Ballot(500, node + 1)) == Ballot(501, node)  # a tie in time
    assert next_ballot(500, node, Ballot(9_000, 1)) == Ballot(9_001, node)  # a clock far ahead


def test_two_nodes_at_the_same_reading_make_different_ballots() -> None:
    a, b = node_tiebreak("http://a:1"), node_tiebreak("http://b:1")
    assert next_ballot(500, a, ZERO_BALLOT) != next_ballot(500, b, ZERO_BALLOT)


def test_the_codec_is_fixed_size_and_keeps_the_order() -> None:
    ballots = [ZERO_BALLOT, Ballot(1, 2**64 - 1), Ballot(2**64 - 1, 0)]
    encoded = [encode_ballot(ballot) for ballot in ballots]
    assert {len(data) for data in encoded} == {BALLOT_BYTES}
    assert sorted(encoded) == encoded  # bytes order as ballots do
    assert [decode_ballot(data) for data in encoded] == ballots
    assert decode_ballot(b"xx" + encoded[1], offset=2) == ballots[1]


def test_too_few_bytes_are_not_a_ballot() -> None:
    with pytest.raises(ValueError, match="needs 16 bytes, 15 left"):
        decode_ballot(bytes(15))
    with pytest.raises(ValueError, match="0 left"):
        decode_ballot(bytes(16), offset=20)


def test_a_ballot_prints_compactly() -> None:
    assert str(Ballot(12, 255)) == "12.00000000000000ff"
