"""The ``cas`` workload's checker: are the conditional writes and serial reads of each key linearizable? A
pure function of the history (and of a time budget, read from the clock it is given).

The model is a register whose state is the key's value (None: absent); every written value is unique, so
a value names a version. Its operations: ``cas-read`` (a serial read: the state), ``cas-write`` [E, N]
(``If-Match`` the version holding E: E becomes N), ``cas-create`` N (``If-None-Match: *``: absent becomes
N), ``cas-delete`` E (``If-Match``: E becomes absent). An ``ok`` write took effect; a ``fail`` with error
``precondition-failed`` (a 412) surely did not, its condition being false when it was evaluated; any
other ``fail`` never reached the key and is left out; an ``info`` write (a 504, a timeout) may have taken
effect at any time after it started, or never. Reads that did not answer are left out.

The search is Wing & Gong's, as Porcupine runs it (Lowe's memoisation): operations in order of their
call and return events; linearize a pending call whose step is legal, backtrack at a return whose call
was not linearized, and skip any configuration (the set of operations linearized, the state) met before.
Keys are checked one by one (a register's history is linearizable iff each key's is). When the budget
runs out the answer is unknown. For an invalid key it reports the smallest window found that cannot be
ordered: the shortest prefix of the key's history that fails (closed: every operation it holds that
finished, finished before the next one started), then the latest quiescent point (no operation in flight
but those whose outcome is unknown) after which the rest still fails, whatever the state at that point.

>>> from kvnode.check.history import History
>>> h = History(clock=iter(range(0, 100, 10)).__next__)
>>> first = h.invoke(0, CAS_CREATE, "k", "a"); _ = h.complete(first, "ok", "a")
>>> w1 = h.invoke(1, CAS_WRITE, "k", ["a", "b"]); w2 = h.invoke(2, CAS_WRITE, "k", ["a", "c"])
>>> _ = h.complete(w1, "ok", ["a", "b"]); _ = h.complete(w2, "ok", ["a", "c"])
>>> verdict = check_cas(h.ops, Budget(10.0, clock=lambda: 0.0))
>>> verdict.line()
'cas: invalid (keys 1, operations 3, ok 3, refused 0, info 0, invalid keys 1, unknown keys 0)'
>>> print(verdict.problems[0])
k: no order of these 2 operations is legal (0.000 s to 0.000 s): op 2 cas-write 'a'->'b' ok; \
op 3 cas-write 'a'->'c' ok
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from kvnode.check.history import Call, Op, calls
from kvnode.check.verdict import Verdict

__all__ = [
    "CAS_CREATE",
    "CAS_DELETE",
    "CAS_READ",
    "CAS_WRITE",
    "OPERATIONS",
    "PRECONDITION_FAILED",
    "Budget",
    "check_cas",
]

CAS_READ, CAS_WRITE, CAS_CREATE, CAS_DELETE = "cas-read", "cas-write", "cas-create", "cas-delete"
OPERATIONS = (CAS_READ, CAS_WRITE, CAS_CREATE, CAS_DELETE)
PRECONDITION_FAILED = "precondition-failed"  # a fail's error for a 412: the condition was false
_SHOWN = 12  # operations named in a window's line; the report's history has them all
_BUDGET_EVERY = 1024  # search steps between two looks at the clock


class _Any:
    """The state at the start of a window: any value at all (a read or a write's condition fixes it)."""

    def __repr__(self) -> str:
        return "any"


ANY: Final = _Any()
State = str | None | _Any


class Budget:
    """Seconds the search may take, by ``clock`` (a monotonic clock in seconds, injected)."""

    def __init__(self, seconds: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._deadline = clock() + seconds

    def spent(self) -> bool:
        return self._clock() >= self._deadline


@dataclass(frozen=True, slots=True)
class _Step:
    """One operation of the model."""

    call: Call
    outcome: str  # ok, refused or info
    expected: str | None  # the value a write's condition names (a create's: None)
    new: str | None  # what a read read, or what a write leaves (a delete: None)

    @property
    def invoked(self) -> int:
        return self.call.invoked

    @property
    def completed(self) -> float:
        return self.call.completed


def _steps(key_calls: Sequence[Call]) -> list[_Step]:
    steps = []
    for call in key_calls:
        outcome = {"ok": "ok", "info": "info"}.get(call.type, "")
        if call.type == "fail" and call.error == PRECONDITION_FAILED:
            outcome = "refused"
        if not outcome or (call.f == CAS_READ and outcome != "ok"):
            continue  # never reached the key, or a read that saw nothing: no constraint
        value = call.value
        if call.f == CAS_WRITE and isinstance(value, list) and len(value) == 2:
            steps.append(_Step(call, outcome, value[0], value[1]))
        elif call.f == CAS_DELETE and not isinstance(value, list):
            steps.append(_Step(call, outcome, value, None))
        elif call.f in (CAS_READ, CAS_CREATE) and not isinstance(value, list):
            steps.append(_Step(call, outcome, None, value))
    return steps


def _apply(state: State, step: _Step) -> tuple[bool, State]:
    """Whether ``step`` may happen in ``state``, and the state after it."""
    if step.call.f == CAS_READ:
        return state is ANY or state == step.new, step.new
    holds = state is ANY or state == step.expected
    if step.outcome == "refused":
        return state is ANY or not holds, state
    return holds, step.new


def _search(steps: Sequence[_Step], initial: State, budget: Budget) -> bool | None:
    """Whether the steps are linearizable from ``initial``; None when the budget ran out."""
    events = sorted(
        [(step.invoked, 0, position) for position, step in enumerate(steps)]
        + [(step.completed, 1, position) for position, step in enumerate(steps) if step.completed < math.inf]
    )
    end = len(events) + 1  # events are 1..n in a doubly linked list; 0 is its head
    following = list(range(1, end + 1))
    preceding = list(range(-1, end))
    is_call = [False] + [kind == 0 for _, kind, _ in events]
    step_at = [0] + [position for _, _, position in events]
    call_of = [0] * len(steps)
    return_of = [0] * len(steps)  # 0: no return (an info: it may take effect at any later time)
    for event, (_, kind, position) in enumerate(events, 1):
        (call_of if kind == 0 else return_of)[position] = event

    def unlink(event: int) -> None:
        following[preceding[event]] = following[event]
        preceding[following[event]] = preceding[event]

    def relink(event: int) -> None:
        following[preceding[event]] = event
        preceding[following[event]] = event

    returns_left = sum(1 for event in return_of if event)
    state, linearized = initial, 0
    seen = {(0, initial)}
    undo: list[tuple[int, State, int]] = []
    entry, count = following[0], 0
    while returns_left:
        count += 1
        if count % _BUDGET_EVERY == 0 and budget.spent():
            return None
        position = step_at[entry]
        if is_call[entry]:
            legal, after = _apply(state, steps[position])
            configuration = (linearized | 1 << position, after)
            if legal and configuration not in seen:
                seen.add(configuration)
                undo.append((position, state, linearized))
                linearized, state = configuration
                unlink(call_of[position])
                if return_of[position]:
                    unlink(return_of[position])
                    returns_left -= 1
                entry = following[0]
                continue
            entry = following[entry]
        else:  # the return of a call not linearized yet: undo the last choice and try the next
            if not undo:
                return False
            position, state, linearized = undo.pop()
            if return_of[position]:
                relink(return_of[position])
                returns_left += 1
            relink(call_of[position])
            entry = following[call_of[position]]
    return True


def _closed_prefix(steps: Sequence[_Step], last: int) -> list[_Step]:
    """The steps started by the time step ``last`` started, and those started before the last of these
    finished, again and again: nothing outside it can come before what it holds (but info steps)."""
    until: float = steps[last].invoked
    while True:
        prefix = [step for step in steps if step.invoked <= until]
        finished = max((step.completed for step in prefix if step.completed < math.inf), default=until)
        if finished <= until:
            return prefix
        until = finished


def _from(prefix: Sequence[_Step], start: int) -> list[_Step]:
    """The window from quiescent point ``start``: the steps from it on, and the info steps before it."""
    return [step for step in prefix[:start] if step.outcome == "info"] + list(prefix[start:])


def _quiescent(prefix: Sequence[_Step]) -> list[int]:
    """Positions at which every step started before has finished (info steps aside)."""
    points, finished = [], -math.inf
    for position, step in enumerate(prefix):
        if position and finished < step.invoked:
            points.append(position)
        if step.outcome != "info":
            finished = max(finished, step.completed)
    return points


def _window(steps: Sequence[_Step], budget: Budget) -> list[_Step]:
    """The smallest window found that cannot be ordered, in steps known to fail as a whole."""
    low, high = 0, len(steps) - 1  # the shortest failing closed prefix ends at step high
    while low < high:
        middle = (low + high) // 2
        verdict = _search(_closed_prefix(steps, middle), None, budget)
        if verdict is None:
            return list(steps)
        low, high = (low, middle) if verdict is False else (middle + 1, high)
    prefix = _closed_prefix(steps, high)
    # A later quiescent start makes a smaller window, and if one fails every earlier one does: bisect.
    points = _quiescent(prefix)
    low, high, found = 0, len(points) - 1, prefix
    while low <= high:
        middle = (low + high) // 2
        window = _from(prefix, points[middle])
        verdict = _search(window, ANY, budget)
        if verdict is None:
            break
        if verdict is False:
            found, low = window, middle + 1
        else:
            high = middle - 1
    return found


def _describe(step: _Step) -> str:
    call = step.call
    if call.f == CAS_READ:
        what = f"-> {step.new!r}"
    elif call.f == CAS_WRITE:
        what = f"{step.expected!r}->{step.new!r}"
    else:
        what = repr(step.new if call.f == CAS_CREATE else step.expected)
    return f"op {call.index} {call.f} {what} {step.outcome}"


def _problem(key: str, window: Sequence[_Step]) -> str:
    shown = "; ".join(_describe(step) for step in window[:_SHOWN])
    more = f"; and {len(window) - _SHOWN} more" if len(window) > _SHOWN else ""
    first = min(step.invoked for step in window) / 1e9
    last = max(step.completed if step.completed < math.inf else step.invoked for step in window) / 1e9
    return (
        f"{key}: no order of these {len(window)} operations is legal ({first:.3f} s to {last:.3f} s): "
        f"{shown}{more}"
    )


def check_cas(ops: Sequence[Op], budget: Budget) -> Verdict:
    by_key: dict[str, list[Call]] = defaultdict(list)
    for call in calls(op for op in ops if op.f in OPERATIONS):
        by_key[call.key].append(call)
    problems: list[str] = []
    unknown: list[str] = []
    outcomes = {"ok": 0, "refused": 0, "info": 0}
    for key, key_calls in sorted(by_key.items()):
        steps = _steps(key_calls)
        for step in steps:
            outcomes[step.outcome] += 1
        verdict = None if budget.spent() else _search(steps, None, budget)
        if verdict is None:
            unknown.append(key)
        elif verdict is False:
            problems.append(_problem(key, _window(steps, budget)))
    counts = {
        "keys": len(by_key),
        "operations": sum(len(key_calls) for key_calls in by_key.values()),
        **outcomes,
        "invalid keys": len(problems),
        "unknown keys": len(unknown),
    }
    if problems:
        return Verdict("cas", False, counts, problems)
    if unknown:
        return Verdict(
            "cas", None, counts, [f"the search ran out of time on {len(unknown)} keys: {unknown[0]}..."]
        )
    if outcomes["ok"] + outcomes["refused"] == 0:
        return Verdict("cas", None, counts, ["no conditional write or serial read answered"])
    return Verdict("cas", True, counts)
