"""Verdicts: one line each, and the exit status of a check from all of them."""

from __future__ import annotations

from kvnode.check.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, Verdict, exit_status

VALID = Verdict("set", True, {"lost": 0})
INVALID = Verdict("register", False, {"stale": 2}, ["stale read ..."])
UNKNOWN = Verdict("cas", None, {}, ["the search ran out of time"])


def test_a_verdict_is_one_line_with_its_counts() -> None:
    assert VALID.line() == "set: valid (lost 0)"
    assert UNKNOWN.line() == "cas: unknown"


def test_the_exit_status_is_invalid_over_unknown_over_valid() -> None:
    assert exit_status([VALID, VALID]) == EXIT_VALID == 0
    assert exit_status([VALID, UNKNOWN, INVALID]) == EXIT_INVALID == 1
    assert exit_status([VALID, UNKNOWN]) == EXIT_UNKNOWN == 2
    assert exit_status([]) == EXIT_UNKNOWN  # nothing checked is not valid
