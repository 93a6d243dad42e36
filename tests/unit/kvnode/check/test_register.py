"""The register checker on hand-built histories: concurrent writes read either way, writes of unknown outcome
read or not, and each way it fails: a stale read (an older value, or nothing), a value never written, one
whose write surely failed, one from a write that started after the read ended."""

from __future__ import annotations

from kvnode.check.register import READ, WRITE, check_register
from tests.histories import history, index_of, op


def test_reads_of_the_newest_or_of_concurrent_writes_are_valid() -> None:
    verdict = check_register(
        history(
            [
                op(0, WRITE, "k", "a", 0, 10),
                op(1, WRITE, "k", "b", 20, 40),
                op(2, WRITE, "k", "c", 25, 45),  # concurrent with b: either may be newer
                op(3, READ, "k", None, 50, 60, result="b"),
                op(3, READ, "k", None, 61, 70, result="c"),
                op(4, READ, "k", None, 30, 35, result="a"),  # concurrent with b and c
                op(5, WRITE, "other", "x", 0, 10),
                op(5, READ, "other", None, 20, 30, result="x"),
            ]
        )
    )
    assert verdict.valid is True, verdict.problems
    assert verdict.counts == {
        "keys": 2,
        "writes": 4,
        "acknowledged": 4,
        "reads": 4,
        "stale": 0,
        "unexpected": 0,
    }


def test_a_write_of_unknown_outcome_may_be_read_any_time_after_it_started_or_never() -> None:
    verdict = check_register(
        history(
            [
                op(0, WRITE, "k", "a", 0, 10),
                op(1, WRITE, "k", "b", 20, 30, type="info"),
                op(2, READ, "k", None, 40, 50, result="a"),
                op(2, READ, "k", None, 60, 70, result="b"),
                op(2, READ, "k", None, 80, 90, result="a"),  # b's may still be landing: never known done
            ]
        )
    )
    assert verdict.valid is True, verdict.problems


def test_a_read_after_a_newer_write_was_acknowledged_returning_an_older_value_is_stale() -> None:
    ops = history(
        [
            op(0, WRITE, "k", "a", 0, 10),
            op(0, WRITE, "k", "b", 20, 30),
            op(1, READ, "k", None, 40, 50, result="a"),
        ]
    )
    verdict = check_register(ops)
    assert verdict.valid is False and verdict.counts["stale"] == 1
    read, old, new = (
        index_of(ops, READ, "k", "a"),
        index_of(ops, WRITE, "k", "a"),
        index_of(ops, WRITE, "k", "b"),
    )
    assert verdict.problems == [
        f"stale read of k: op {read} (started 0.040 s) returned 'a' (written by op {old}), but op {new} "
        f"wrote 'b' after op {old} was acknowledged and was acknowledged itself at 0.030 s"
    ]


def test_a_read_that_finds_nothing_after_a_write_was_acknowledged_is_stale() -> None:
    verdict = check_register(
        history([op(0, WRITE, "k", "a", 0, 10), op(1, READ, "k", None, 20, 30, result=None)])
    )
    assert verdict.valid is False and verdict.problems[0].startswith(
        "stale read of k: op 2 (started 0.020 s) found"
    )


def test_values_no_write_could_have_made_are_unexpected() -> None:
    verdict = check_register(
        history(
            [
                op(0, WRITE, "k", "a", 0, 10),
                op(0, WRITE, "k", "refused", 20, 30, type="fail"),
                op(1, READ, "k", None, 40, 50, result="refused"),
                op(1, READ, "k", None, 60, 70, result="never-written"),
                op(1, READ, "k", None, 80, 90, result="future"),
                op(2, WRITE, "k", "future", 95, 99),
            ]
        )
    )
    assert verdict.valid is False and verdict.counts["unexpected"] == 3


def test_no_read_or_no_acknowledged_write_is_unknown() -> None:
    assert check_register(history([op(0, WRITE, "k", "a", 0, 10)])).valid is None
    assert check_register(history([op(1, READ, "k", None, 20, 30, result=None)])).valid is None
