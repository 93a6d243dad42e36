"""The linearizability checker on hand-built histories of conditional writes and serial reads: valid ones
(concurrent operations in the one legal order, refusals that were right, writes of unknown outcome that did
or did not take effect), invalid ones (two writes granted on one version, a refusal while the condition
held, a read of an overwritten value, a value back from the dead), the smallest window named, and a search
that runs out of its budget answering unknown."""

from __future__ import annotations

import itertools
import random
from typing import Any

from kvnode.check.history import Value
from kvnode.check.linearizable import (
    CAS_CREATE,
    CAS_DELETE,
    CAS_READ,
    CAS_WRITE,
    PRECONDITION_FAILED,
    Budget,
    check_cas,
)
from kvnode.check.verdict import Verdict
from tests.histories import Planned, history, index_of, op

REFUSED: dict[str, Any] = {"type": "fail", "error": PRECONDITION_FAILED}


def check(planned: list[Planned], seconds: float = 60.0) -> Verdict:
    return check_cas(history(planned), Budget(seconds, clock=lambda: 0.0))


def test_concurrent_operations_with_one_legal_order_are_valid() -> None:
    verdict = check(
        [
            op(0, CAS_CREATE, "k", "a", 0, 10),
            op(1, CAS_WRITE, "k", ["a", "b"], 20, 50),
            op(2, CAS_READ, "k", None, 25, 30, result="b"),  # b took effect before this read: legal
            op(3, CAS_WRITE, "k", ["a", "c"], 22, 60, **REFUSED),  # b won: its condition failed
            op(2, CAS_DELETE, "k", "b", 70, 80),
            op(2, CAS_READ, "k", None, 90, 95, result=None),
            op(4, CAS_CREATE, "k", "d", 100, 110),
            op(4, CAS_CREATE, "k", "e", 120, 130, **REFUSED),
        ]
    )
    assert verdict.valid is True, verdict.problems
    assert verdict.counts["ok"] == 6 and verdict.counts["refused"] == 2


def test_a_write_of_unknown_outcome_may_have_taken_effect_late_or_never() -> None:
    applied_late = [
        op(0, CAS_CREATE, "k", "a", 0, 10),
        op(1, CAS_WRITE, "k", ["a", "b"], 20, 30, type="info"),
        op(2, CAS_READ, "k", None, 40, 50, result="a"),
        op(2, CAS_READ, "k", None, 60, 70, result="b"),
    ]
    never = [*applied_late[:3], op(2, CAS_READ, "k", None, 60, 70, result="a")]
    assert check(applied_late).valid is True
    assert check(never).valid is True


def test_failed_operations_that_never_reached_the_key_and_unanswered_reads_constrain_nothing() -> None:
    verdict = check(
        [
            op(0, CAS_CREATE, "k", "a", 0, 10),
            op(1, CAS_WRITE, "k", ["a", "b"], 20, 30, type="fail", error="503 overloaded"),
            op(2, CAS_READ, "k", None, 40, 50, type="fail", result=None),
            op(2, CAS_READ, "k", None, 60, 70, result="a"),
        ]
    )
    assert verdict.valid is True
    assert verdict.counts["operations"] == 4 and verdict.counts["ok"] == 2


def test_two_writes_granted_on_the_same_version_are_invalid_and_named() -> None:
    planned = [
        op(0, CAS_CREATE, "k", "a", 0, 10),
        op(1, CAS_WRITE, "k", ["a", "b"], 20, 40),
        op(2, CAS_WRITE, "k", ["a", "c"], 25, 45),
    ]
    ops = history(planned)
    verdict = check_cas(ops, Budget(60.0, clock=lambda: 0.0))
    assert verdict.valid is False and verdict.counts["invalid keys"] == 1
    first, second = index_of(ops, CAS_WRITE, "k", ["a", "b"]), index_of(ops, CAS_WRITE, "k", ["a", "c"])
    assert verdict.problems == [
        f"k: no order of these 2 operations is legal (0.020 s to 0.045 s): op {first} cas-write 'a'->'b' ok; "
        f"op {second} cas-write 'a'->'c' ok"
    ]


def test_a_refusal_while_the_condition_held_is_invalid() -> None:
    verdict = check(
        [
            op(0, CAS_CREATE, "k", "a", 0, 10),
            op(1, CAS_WRITE, "k", ["a", "b"], 20, 30, **REFUSED),
        ]
    )
    assert verdict.valid is False


def test_a_read_of_an_overwritten_value_and_a_value_back_from_the_dead_are_invalid() -> None:
    stale = check(
        [
            op(0, CAS_CREATE, "k", "a", 0, 10),
            op(0, CAS_WRITE, "k", ["a", "b"], 20, 30),
            op(1, CAS_READ, "k", None, 40, 50, result="a"),
        ]
    )
    back = check(
        [
            op(0, CAS_CREATE, "k", "a", 0, 10),
            op(0, CAS_DELETE, "k", "a", 20, 30),
            op(1, CAS_READ, "k", None, 40, 50, result=None),
            op(1, CAS_READ, "k", None, 60, 70, result="a"),
        ]
    )
    twice = check([op(0, CAS_CREATE, "k", "a", 0, 10), op(1, CAS_CREATE, "k", "b", 20, 30)])
    assert (stale.valid, back.valid, twice.valid) == (False, False, False)


def test_the_window_is_the_few_operations_after_the_last_quiet_moment_not_the_whole_history() -> None:
    planned = [op(0, CAS_CREATE, "k", "v0", 0, 5)]
    for n in range(1, 40):  # a long legal run, one operation at a time
        planned.append(op(0, CAS_WRITE, "k", [f"v{n - 1}", f"v{n}"], n * 10, n * 10 + 5))
    planned += [
        op(1, CAS_READ, "k", None, 400, 420, result="v39"),
        op(2, CAS_READ, "k", None, 405, 425, result="v38"),  # overlaps the read of v39, and still older
        op(3, CAS_READ, "k", None, 430, 440, result="v39"),
        op(0, CAS_WRITE, "k", ["v39", "v40"], 450, 460),
    ]
    ops = history(planned)
    verdict = check_cas(ops, Budget(60.0, clock=lambda: 0.0))
    assert verdict.valid is False
    (problem,) = verdict.problems
    assert problem.startswith("k: no order of these 2 operations is legal (0.400 s to 0.425 s)"), problem
    assert f"op {index_of(ops, CAS_READ, 'k', 'v38')} cas-read -> 'v38' ok" in problem


def test_a_window_holds_the_writes_of_unknown_outcome_started_before_it() -> None:
    verdict = check(
        [
            op(0, CAS_CREATE, "k", "a", 0, 10),
            op(1, CAS_WRITE, "k", ["a", "b"], 20, 30, type="info"),
            op(2, CAS_READ, "k", None, 40, 50, result="b"),
            op(2, CAS_READ, "k", None, 60, 70, result="a"),  # b took effect: a cannot be back
        ]
    )
    assert verdict.valid is False
    assert "no order of these 3 operations" in verdict.problems[0]
    assert "cas-write 'a'->'b' info" in verdict.problems[0]


def test_a_search_that_runs_out_of_budget_answers_unknown() -> None:
    # Creations and deletions of unknown outcome, concurrent, and a read no order explains: every
    # configuration (each pair unapplied, created, or created and deleted) is tried, 3**12 of them.
    planned = [op(n, CAS_CREATE, "k", f"v{n}", 0, 10, type="info") for n in range(12)]
    planned += [op(n + 12, CAS_DELETE, "k", f"v{n}", 0, 10, type="info") for n in range(12)]
    planned += [op(99, CAS_READ, "k", None, 40, 50, result="nobody-wrote-this")]
    ticks = itertools.count()
    verdict = check_cas(history(planned), Budget(5.0, clock=lambda: float(next(ticks))))
    assert verdict.valid is None
    assert verdict.counts["unknown keys"] == 1
    assert verdict.problems[0].startswith("the search ran out of time on 1 keys")


def test_nothing_answered_is_unknown() -> None:
    assert check([op(0, CAS_CREATE, "k", "a", 0, 10, type="info")]).valid is None


def _simulated(seed: int, operations: int) -> list[Planned]:
    """Operations of a few processes on one atomic register, each taking effect at a random moment within
    its interval (or, for an info, maybe never): linearizable by construction."""
    rng = random.Random(seed)
    moments = []
    for n in range(operations):
        start = rng.uniform(0, 100)
        end = start + rng.uniform(1, 30)
        moments.append((rng.uniform(start, end), start, end, n))
    state: str | None = None
    planned = []
    for _effect, start, end, n in sorted(moments):
        kind = rng.choice([CAS_READ, CAS_WRITE, CAS_CREATE, CAS_DELETE])
        # If-Match names a version the process saw: a value (the workload never names a deletion's)
        expected = state if state is not None and rng.random() < 0.7 else f"v{rng.randrange(operations)}"
        outcome = rng.choice(["ok", "ok", "ok", "info"]) if kind != CAS_READ else "ok"
        if kind == CAS_READ:
            planned.append(op(n, kind, "k", None, start, end, result=state))
            continue
        values: dict[str, Value] = {CAS_WRITE: [expected, f"v{n}"], CAS_CREATE: f"v{n}", CAS_DELETE: expected}
        value = values[kind]
        holds = state is None if kind == CAS_CREATE else state == expected
        applied = holds and not (outcome == "info" and rng.random() < 0.5)
        if applied:
            state = None if kind == CAS_DELETE else f"v{n}"
        elif outcome == "ok":
            outcome = "refused"
        extra = REFUSED if outcome == "refused" else {"type": outcome}
        planned.append(op(n, kind, "k", value, start, None if outcome == "info" else end, **extra))
    return planned


def _brute_force(planned: list[Planned]) -> bool:
    """Whether some order of the operations (any subset of the info ones) is legal and respects real time."""
    reads_answered = [p for p in planned if not (p.f == CAS_READ and p.type != "ok")]
    required = [p for p in reads_answered if p.end is not None]
    optional = [p for p in reads_answered if p.end is None]
    for count in range(len(optional) + 1):
        for chosen in itertools.combinations(optional, count):
            for order in itertools.permutations([*required, *chosen]):
                if _legal(order):
                    return True
    return False


def _legal(order: tuple[Planned, ...]) -> bool:
    for position, earlier in enumerate(order):
        if any(later.end is not None and later.end < earlier.start for later in order[position + 1 :]):
            return False
    state: str | None = None
    for p in order:
        refused = p.error == PRECONDITION_FAILED
        if p.f == CAS_READ:
            if p.result != state:
                return False
            continue
        expected = None if p.f == CAS_CREATE else (p.value[0] if isinstance(p.value, list) else p.value)
        holds = state is None if p.f == CAS_CREATE else state == expected
        if holds == refused:
            return False
        if not refused:
            state = None if p.f == CAS_DELETE else (p.value[1] if isinstance(p.value, list) else p.value)
    return True


def test_histories_of_an_atomic_register_are_valid() -> None:
    for seed in range(40):
        planned = _simulated(seed, 30)
        assert check(planned).valid is True, seed


def test_the_search_agrees_with_trying_every_order_on_small_histories() -> None:
    rng = random.Random(7)
    agreed = {True: 0, False: 0}
    for seed in range(150):
        planned = _simulated(seed, 6)
        reads = [n for n, p in enumerate(planned) if p.f == CAS_READ]
        if reads and rng.random() < 0.7:  # a read that says something else: often no longer legal
            n = rng.choice(reads)
            planned[n] = op(planned[n].process, CAS_READ, "k", None, planned[n].start, planned[n].end,
                            result=rng.choice([None, "v0", "v1", "v2"]))  # fmt: skip
        expected = _brute_force(planned)
        assert check(planned).valid is expected, (seed, planned)
        agreed[expected] += 1
    assert min(agreed.values()) > 20, agreed  # both answers were tried many times
