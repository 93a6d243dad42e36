"""kvnode.healing.exchange: one repair's state machine, step by step, and every answer out of order."""

from __future__ import annotations

import pytest

from kvnode.healing.exchange import SEGMENTS_PER_ROUND, Exchange, ImpossibleStep, Moves, Step
from kvnode.healing.summary import SEGMENTS, SEGMENTS_PER_BRANCH, SegmentTree


def trees_differing_in(segments: list[int]) -> tuple[SegmentTree, SegmentTree]:
    ours, theirs = SegmentTree(), SegmentTree()
    for segment in segments:
        ours.toggle(segment, segment + 1)
    return ours, theirs


def test_equal_trees_end_at_the_branches() -> None:
    exchange = Exchange("p", SegmentTree())
    exchange.branches_answered(SegmentTree().branches)
    assert exchange.step is Step.DONE
    assert exchange.segments_compared == SEGMENTS


def test_a_differing_branch_with_equal_segments_ends_at_the_segments() -> None:
    # The branch hashes differ, but by the time the segments are asked a write has made them equal.
    ours, theirs = trees_differing_in([7])
    exchange = Exchange("p", ours)
    exchange.branches_answered(theirs.branches)
    assert exchange.branches == [0]
    exchange.segments_answered(ours.segment_hashes([0]))  # the peer agrees after all (a write landed)
    assert exchange.step is Step.DONE


def test_rounds_walk_every_differing_segment_once() -> None:
    differing = list(range(0, SEGMENTS, 3))
    ours, theirs = trees_differing_in(differing)
    exchange = Exchange("p", ours)
    exchange.branches_answered(theirs.branches)
    exchange.segments_answered(theirs.segment_hashes(exchange.branches))
    assert exchange.segments_differing == len(differing)
    seen: list[int] = []
    while exchange.step is Step.LISTING:
        assert len(exchange.round) <= SEGMENTS_PER_ROUND
        seen += exchange.round
        exchange.their_page(b"k9", [(b"k1", 1)])  # two pages from the peer
        exchange.my_page(b"", [(b"k0", 5)])
        assert exchange.their_cursor == b"k9"  # still listing: the peer has a page to go
        exchange.their_page(b"", [(b"k2", 2)])
        assert exchange.step.value == "records"
        assert exchange.moves() == Moves(push=[b"k0"], fetch=[b"k1", b"k2"])
        exchange.moved()
    assert exchange.step is Step.DONE
    assert seen == differing


def test_equal_digests_move_nothing_and_differing_ones_are_fetched() -> None:
    ours, theirs = trees_differing_in([SEGMENTS_PER_BRANCH + 1])
    exchange = Exchange("p", ours)
    exchange.branches_answered(theirs.branches)
    exchange.segments_answered(theirs.segment_hashes(exchange.branches))
    exchange.my_page(b"", [(b"same", 1), (b"newer-here", 2), (b"only-here", 3)])
    exchange.their_page(b"", [(b"same", 1), (b"newer-here", 9), (b"only-there", 4)])
    assert exchange.moves() == Moves(push=[b"only-here"], fetch=[b"newer-here", b"only-there"])


def test_answers_out_of_order_are_refused() -> None:
    ours, theirs = trees_differing_in([1])
    exchange = Exchange("p", ours)
    with pytest.raises(ImpossibleStep):
        exchange.segments_answered([])
    with pytest.raises(ImpossibleStep):
        exchange.their_page(b"", [])
    exchange.branches_answered(theirs.branches)
    with pytest.raises(ImpossibleStep):
        exchange.branches_answered(theirs.branches)
    with pytest.raises(ImpossibleStep):
        exchange.moves()
    exchange.segments_answered(theirs.segment_hashes(exchange.branches))
    exchange.their_page(b"", [])
    with pytest.raises(ImpossibleStep):
        exchange.their_page(b"", [])  # after the peer's last page
    with pytest.raises(ImpossibleStep):
        exchange.moved()


def test_a_failure_ends_the_exchange_at_any_step() -> None:
    ours, theirs = trees_differing_in([1])
    exchange = Exchange("p", ours)
    exchange.branches_answered(theirs.branches)
    exchange.fail("unreachable")
    assert exchange.step is Step.FAILED and exchange.failure == "unreachable"
    with pytest.raises(ImpossibleStep):
        exchange.segments_answered(theirs.segment_hashes([0]))
