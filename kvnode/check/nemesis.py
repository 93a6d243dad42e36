"""The check's nemesis: one fault at a time, in turns of quiet then fault, for as long as the workload runs;
the kinds asked for that can be injected here taken in rounds, each round in an order drawn from the seed
(so every kind comes up), each fault's window recorded for the report. What a kind does is up to the
cluster (:class:`Faults`: kvnode.check.local for a cluster the check started, kvnode.check.remote for a
running one, which injects only what its admin API allows and says why it skips the rest).

>>> turn_seconds(600), turn_seconds(4)
(15.0, 1.0)
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kvnode.ops.node_http import Refused, Unreachable

__all__ = ["KINDS", "Fault", "Faults", "Nemesis", "turn_seconds", "until_stopped"]

KINDS = ("kill", "pause", "partition", "clock", "membership", "disk")
# What injecting or ending a fault may raise: a node that does not start again (NodeStartError is a
# RuntimeError), a command that fails (OSError), a change refused or not finished in time.
_FAULT_ERRORS = (OSError, RuntimeError, Refused, Unreachable, TimeoutError)


@dataclass
class Fault:
    """One fault: its kind, its target (a node's URL), what was done; ``done`` when it ends as it is begun
    (a membership change); its window in nanoseconds since the check began."""

    kind: str
    target: str
    note: str
    done: bool = False
    started: int = 0
    ended: int | None = None

    def describe(self) -> str:
        return f"{self.kind} {self.target} ({self.note})"


class Faults(Protocol):
    def unavailable(self, kind: str) -> str:
        """The line that says ``kind`` is skipped here, and why; empty when it can be injected."""
        ...

    def targets(self) -> list[str]:
        """The nodes the workers send their requests to, now."""
        ...

    def begin(self, kind: str, rng: random.Random) -> Fault: ...

    def end(self, fault: Fault) -> None: ...

    def heal(self) -> None:
        """Undo whatever is left: every node up, awake, with its own clock, its disk free."""
        ...


def turn_seconds(run_seconds: float) -> float:
    """How long each quiet spell and each fault lasts: an eighth of the run, from 1 to 15 s."""
    return min(15.0, max(1.0, run_seconds / 8))


class Nemesis:
    """Injects faults of ``kinds`` into ``faults`` until stopped. ``clock`` gives nanoseconds since the
    check began (the history's clock); each quiet spell and each fault last ``turn_s`` (by default
    :func:`turn_seconds` of the run's)."""

    def __init__(
        self,
        faults: Faults,
        kinds: Sequence[str],
        run_seconds: float,
        rng: random.Random,
        clock: Callable[[], int],
        turn_s: float | None = None,
    ) -> None:
        self._faults = faults
        self.skipped = [faults.unavailable(kind) for kind in kinds if faults.unavailable(kind)]
        self.kinds = [kind for kind in kinds if not faults.unavailable(kind)]
        self.windows: list[Fault] = []
        self.errors: list[str] = []
        self.active: Fault | None = None
        self._turn = turn_seconds(run_seconds) if turn_s is None else turn_s
        self._rng = rng
        self._clock = clock
        self._round: list[str] = []  # the kinds still to come in this round

    async def run(self, stop: asyncio.Event) -> None:
        while self.kinds and not await until_stopped(stop, self._turn):
            kind = self._next_kind()
            started = self._clock()
            self.active = Fault(kind, "-", "being injected")  # for the progress lines meanwhile
            try:
                fault = await asyncio.to_thread(self._faults.begin, kind, self._rng)
            except _FAULT_ERRORS as error:
                self.errors.append(f"{kind} could not be injected: {error}")
                self.active = None
                continue
            fault.started = started
            self.windows.append(fault)
            if fault.done:
                fault.ended = self._clock()
                self.active = None
                continue
            self.active = fault
            await until_stopped(stop, self._turn)
            await self._end(fault)

    def _next_kind(self) -> str:
        if not self._round:
            self._round = self._rng.sample(self.kinds, len(self.kinds))
        return self._round.pop()

    async def _end(self, fault: Fault) -> None:
        try:
            await asyncio.to_thread(self._faults.end, fault)
        except _FAULT_ERRORS as error:
            self.errors.append(f"{fault.describe()} could not be ended: {error}")
        fault.ended = self._clock()
        self.active = None

    async def heal(self) -> None:
        """End the fault under way (the run is over), then undo anything left."""
        if self.active is not None:
            await self._end(self.active)
        try:
            await asyncio.to_thread(self._faults.heal)
        except _FAULT_ERRORS as error:
            self.errors.append(f"the cluster could not be healed: {error}")


async def until_stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stop``; whether it was stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
