"""The check's workloads: what each worker asks next, how it asks it (kvnode.check.calls), and which checker
judges the history. ``WORKLOADS`` names them; a workload more is a class with these methods and a line there.

- ``set``: elements (fresh keys) added with a PUT of a unique value, read now and then, a few removed; every
  element read once more after the cluster healed (kvnode.check.set_full).
- ``register``: unique values written to a few keys and read back, both with the default quorum
  (kvnode.check.register).
- ``cas``: conditional writes to a few keys (``If-Match`` the version last read, ``If-None-Match: *`` when
  absent, now and then ``If-Match`` an older version, which must be refused) and serial reads
  (``serial=1``), checked for linearizability (kvnode.check.linearizable).

Values are unique within a check; keys are ``PREFIX-WORKLOAD-...``, the prefix fresh for every run.

>>> workload = RegisterWorkload("kvcheck-x", keys=2)
>>> workload.next_invocation(0, random.Random(1))
Invocation(f='register-write', key='kvcheck-x-register-0', value='r0')
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kvnode.check import linearizable, register, set_full
from kvnode.check.calls import Caller, Reply, read_outcome, write_outcome
from kvnode.check.history import Op, OpType, Value
from kvnode.check.linearizable import Budget
from kvnode.check.verdict import Verdict

__all__ = [
    "WORKLOADS",
    "CasWorkload",
    "Completion",
    "Invocation",
    "RegisterWorkload",
    "SetWorkload",
    "Workload",
]


@dataclass(frozen=True, slots=True)
class Invocation:
    f: str
    key: str
    value: Value = None


@dataclass(frozen=True, slots=True)
class Completion:
    type: OpType
    value: Value
    reply: Reply
    error: str = ""


class Workload(Protocol):
    name: str

    def next_invocation(self, worker: int, rng: random.Random) -> Invocation: ...

    async def perform(self, worker: int, invocation: Invocation, caller: Caller, node: str) -> Completion: ...

    def final_reads(self) -> list[Invocation]:
        """What to read once the cluster healed, before the history is checked."""
        ...

    def check(self, ops: Sequence[Op], budget: Budget) -> Verdict: ...


def _text(reply: Reply) -> str | None:
    """A read's value: the body as text for a 200, None (absent) otherwise."""
    return reply.body.decode("utf-8", "replace") if reply.status == 200 else None


async def _read(invocation: Invocation, caller: Caller, node: str, serial: bool = False) -> Completion:
    reply = await caller.entity(node, "GET", invocation.key, {"serial": "1"} if serial else None)
    outcome, error = read_outcome(reply)
    return Completion(outcome, _text(reply) if outcome == "ok" else None, reply, error)


async def _write(
    invocation: Invocation,
    caller: Caller,
    node: str,
    value: str | None,
    headers: dict[str, str] | None = None,
) -> Completion:
    """A PUT of ``value``, or a DELETE when it is None."""
    method, body = ("PUT", value.encode()) if value is not None else ("DELETE", None)
    reply = await caller.entity(node, method, invocation.key, headers=headers, body=body)
    outcome, error = write_outcome(reply)
    if reply.status == 412:
        error = linearizable.PRECONDITION_FAILED
    return Completion(outcome, invocation.value, reply, error)


class SetWorkload:
    name = "set"

    def __init__(self, prefix: str, keys: int) -> None:
        self._prefix = prefix
        self._attempted: list[str] = []
        self._present: list[str] = []  # acknowledged, not being removed: what reads and removals pick from
        self._acknowledged: list[str] = []

    def next_invocation(self, worker: int, rng: random.Random) -> Invocation:
        choice = rng.random()
        if 0.5 <= choice < 0.9 and self._acknowledged:
            return Invocation(set_full.READ, rng.choice(self._acknowledged))
        if choice >= 0.9 and self._present:
            return Invocation(set_full.REMOVE, self._present.pop(rng.randrange(len(self._present))))
        key = f"{self._prefix}-set-{len(self._attempted)}"
        self._attempted.append(key)
        return Invocation(set_full.ADD, key, f"s{len(self._attempted) - 1}")

    async def perform(self, worker: int, invocation: Invocation, caller: Caller, node: str) -> Completion:
        if invocation.f in (set_full.READ, set_full.FINAL_READ):
            return await _read(invocation, caller, node)
        value = invocation.value if invocation.f == set_full.ADD else None
        completion = await _write(invocation, caller, node, value if isinstance(value, str) else None)
        if invocation.f == set_full.ADD and completion.type == "ok":
            self._present.append(invocation.key)
            self._acknowledged.append(invocation.key)
        return completion

    def final_reads(self) -> list[Invocation]:
        return [Invocation(set_full.FINAL_READ, key) for key in self._attempted]

    def check(self, ops: Sequence[Op], budget: Budget) -> Verdict:
        return set_full.check_set(ops)


class RegisterWorkload:
    name = "register"

    def __init__(self, prefix: str, keys: int) -> None:
        self._keys = [f"{prefix}-register-{index}" for index in range(keys)]
        self._written = 0

    def next_invocation(self, worker: int, rng: random.Random) -> Invocation:
        key = rng.choice(self._keys)
        if rng.random() < 0.5:
            return Invocation(register.READ, key)
        self._written += 1
        return Invocation(register.WRITE, key, f"r{self._written - 1}")

    async def perform(self, worker: int, invocation: Invocation, caller: Caller, node: str) -> Completion:
        if invocation.f == register.READ:
            return await _read(invocation, caller, node)
        value = invocation.value
        return await _write(invocation, caller, node, value if isinstance(value, str) else None)

    def final_reads(self) -> list[Invocation]:
        return []

    def check(self, ops: Sequence[Op], budget: Budget) -> Verdict:
        return register.check_register(ops)


_KNOWN = 3  # versions a worker remembers of each key: the latest, and older ones for a stale If-Match


class CasWorkload:
    name = "cas"

    def __init__(self, prefix: str, keys: int) -> None:
        self._keys = [f"{prefix}-cas-{index}" for index in range(keys)]
        self._written = 0
        # per (worker, key): the versions it saw, oldest first, as (value, etag); None for absent
        self._known: dict[tuple[int, str], list[tuple[str | None, str]]] = {}

    def next_invocation(self, worker: int, rng: random.Random) -> Invocation:
        key = rng.choice(self._keys)
        known = self._known.get((worker, key), [])
        choice = rng.random()
        if not known or choice < 0.3:
            return Invocation(linearizable.CAS_READ, key)
        value, _ = known[-1]
        if value is None:
            return self._new(linearizable.CAS_CREATE, key, None)
        if choice < 0.85:
            return self._new(linearizable.CAS_WRITE, key, value)
        if choice < 0.95 or len(known) == 1:
            return Invocation(linearizable.CAS_DELETE, key, value)
        older = [seen for seen, _ in known[:-1] if seen is not None and seen != value]
        return self._new(linearizable.CAS_WRITE, key, rng.choice(older) if older else value)

    def _new(self, f: str, key: str, expected: str | None) -> Invocation:
        value = f"c{self._written}"
        self._written += 1
        return Invocation(f, key, value if f == linearizable.CAS_CREATE else [expected, value])

    async def perform(self, worker: int, invocation: Invocation, caller: Caller, node: str) -> Completion:
        key = invocation.key
        known = self._known.setdefault((worker, key), [])
        etags = dict(known)
        if invocation.f == linearizable.CAS_READ:
            completion = await _read(invocation, caller, node, serial=True)
            seen = completion.value if isinstance(completion.value, str) else None
            leaves: tuple[str | None, str] = (seen, completion.reply.etag)
        elif invocation.f == linearizable.CAS_CREATE:
            value = invocation.value if isinstance(invocation.value, str) else ""
            completion = await _write(invocation, caller, node, value, {"If-None-Match": "*"})
            leaves = (value, completion.reply.etag)
        else:
            expected, new = (
                invocation.value if isinstance(invocation.value, list) else (invocation.value, None)
            )
            match = {"If-Match": etags.get(expected, "")}
            completion = await _write(invocation, caller, node, new, match)
            leaves = (new, completion.reply.etag)
        if completion.type != "ok":
            known.clear()  # the key's version is unknown now: read it again before writing
        elif leaves[0] is None or leaves[1]:  # a value is usable in If-Match only with its ETag
            known.append(leaves)
            del known[:-_KNOWN]
        return completion

    def final_reads(self) -> list[Invocation]:
        return []

    def check(self, ops: Sequence[Op], budget: Budget) -> Verdict:
        return linearizable.check_cas(ops, budget)


WORKLOADS: dict[str, Callable[[str, int], Workload]] = {
    "set": SetWorkload,
    "register": RegisterWorkload,
    "cas": CasWorkload,
}
