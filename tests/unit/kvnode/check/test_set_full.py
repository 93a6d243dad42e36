"""The set checker on hand-built histories: valid ones (info adds and removals either way), and each way it
fails: lost (with the first read that missed it), resurrected, unexpected; stale reads counted; unknown
when nothing was acknowledged or an element the verdict needs was never read back."""

from __future__ import annotations

from kvnode.check.set_full import ADD, FINAL_READ, READ, REMOVE, check_set
from tests.histories import history, index_of, op


def test_added_elements_read_back_and_removed_ones_stay_away_is_valid() -> None:
    verdict = check_set(
        history(
            [
                op(0, ADD, "e1", "v1", 0, 10),
                op(1, ADD, "e2", "v2", 5, 15),
                op(0, REMOVE, "e2", None, 20, 30),
                op(2, READ, "e1", None, 35, 40, result="v1"),
                op(3, FINAL_READ, "e1", None, 100, 110, result="v1"),
                op(3, FINAL_READ, "e2", None, 120, 130, result=None),
            ]
        )
    )
    assert verdict.valid is True, verdict.problems
    assert verdict.counts["acknowledged"] == 2 and verdict.counts["removed"] == 1


def test_an_add_or_removal_of_unknown_outcome_may_go_either_way() -> None:
    for final in ("v1", None):
        verdict = check_set(
            history(
                [
                    op(0, ADD, "e1", "v1", 0, 10, type="info"),
                    op(1, ADD, "e2", "v2", 0, 10),
                    op(1, REMOVE, "e2", None, 20, 30, type="info"),
                    op(2, ADD, "e3", "v3", 0, 10),
                    op(3, FINAL_READ, "e1", None, 100, 110, result=final),
                    op(3, FINAL_READ, "e2", None, 120, 130, result=None if final else "v2"),
                    op(3, FINAL_READ, "e3", None, 140, 150, result="v3"),
                ]
            )
        )
        assert verdict.valid is True, verdict.problems


def test_an_acknowledged_add_missing_after_the_heal_is_lost_with_the_first_read_that_missed_it() -> None:
    ops = history(
        [
            op(0, ADD, "e1", "v1", 0, 10),
            op(1, READ, "e1", None, 12, 14, result="v1"),
            op(1, READ, "e1", None, 20, 25, result=None),
            op(2, FINAL_READ, "e1", None, 100, 110, result=None),
        ]
    )
    verdict = check_set(ops)
    assert verdict.valid is False
    assert verdict.counts["lost"] == 1 and verdict.counts["stale"] == 1
    first_missing = index_of(ops, READ, "e1", None)
    assert verdict.problems == [
        f"lost e1: added by op 0 (acknowledged at 0.010 s), absent from the final read; first missing: op "
        f"{first_missing} at 0.020 s; last seen: op {index_of(ops, READ, 'e1', 'v1')}"
    ]


def test_an_add_whose_removal_surely_failed_must_still_be_there() -> None:
    verdict = check_set(
        history(
            [
                op(0, ADD, "e1", "v1", 0, 10),
                op(0, REMOVE, "e1", None, 20, 30, type="fail"),
                op(1, FINAL_READ, "e1", None, 100, 110, result=None),
            ]
        )
    )
    assert verdict.valid is False and verdict.counts["lost"] == 1


def test_an_acknowledged_removal_whose_element_comes_back_is_resurrected() -> None:
    ops = history(
        [
            op(0, ADD, "e1", "v1", 0, 10),
            op(0, REMOVE, "e1", None, 20, 30),
            op(1, READ, "e1", None, 40, 45, result="v1"),
            op(1, FINAL_READ, "e1", None, 100, 110, result="v1"),
        ]
    )
    verdict = check_set(ops)
    assert verdict.valid is False
    assert verdict.counts["resurrected"] == 1 and verdict.counts["stale"] == 1
    removal = index_of(ops, REMOVE, "e1", None)
    assert verdict.problems[0].startswith(
        f"resurrected e1: removed by op {removal} (acknowledged at 0.030 s)"
    )


def test_a_value_never_written_or_refused_is_unexpected() -> None:
    verdict = check_set(
        history(
            [
                op(0, ADD, "e1", "v1", 0, 10),
                op(1, ADD, "e2", "v2", 0, 10, type="fail"),
                op(2, FINAL_READ, "e1", None, 100, 110, result="garbage"),
                op(2, FINAL_READ, "e2", None, 120, 130, result="v2"),
            ]
        )
    )
    assert verdict.valid is False and verdict.counts["unexpected"] == 2


def test_a_read_concurrent_with_the_add_or_the_removal_is_not_stale() -> None:
    verdict = check_set(
        history(
            [
                op(0, ADD, "e1", "v1", 0, 10),
                op(1, READ, "e1", None, 5, 12, result=None),  # started before the add was acknowledged
                op(0, REMOVE, "e1", None, 20, 30),
                op(1, READ, "e1", None, 25, 35, result=None),  # during the removal
                op(2, FINAL_READ, "e1", None, 100, 110, result=None),
            ]
        )
    )
    assert verdict.valid is True and verdict.counts["stale"] == 0


def test_nothing_acknowledged_or_an_element_not_read_back_is_unknown() -> None:
    nothing = check_set(history([op(0, ADD, "e1", "v1", 0, 10, type="info")]))
    assert nothing.valid is None and "no add was acknowledged" in nothing.problems[0]
    unread = check_set(
        history(
            [
                op(0, ADD, "e1", "v1", 0, 10),
                op(1, FINAL_READ, "e1", None, 100, 110, type="fail", result=None),
            ]
        )
    )
    assert unread.valid is None and unread.counts["unread"] == 1
