"""The nemesis with faults of its own (a recording stand-in): kinds that cannot be injected skipped with
their line, one fault at a time begun and ended in turn, its window recorded, a membership change complete
as it begins, a failure to inject recorded and the run going on, the fault under way ended by the heal."""

from __future__ import annotations

import asyncio
import itertools
import random

from kvnode.check.nemesis import Fault, Nemesis, turn_seconds


class Recording:
    """Faults that say what was done; ``stop`` is set once ``faults`` of them have begun."""

    def __init__(self, stop: asyncio.Event, faults: int, failing: str = "") -> None:
        self.done: list[str] = []
        self._stop, self._faults, self._failing = stop, faults, failing
        self._loop = asyncio.get_running_loop()  # begin runs in a thread: it sets stop through the loop

    def unavailable(self, kind: str) -> str:
        return "disk skipped: they need root" if kind == "disk" else ""

    def targets(self) -> list[str]:
        return ["http://n1"]

    def begin(self, kind: str, rng: random.Random) -> Fault:
        self.done.append(f"begin {kind}")
        if len([line for line in self.done if line.startswith("begin")]) >= self._faults:
            self._loop.call_soon_threadsafe(self._stop.set)
        if kind == self._failing:
            raise OSError("ip: cannot")
        return Fault(kind, "http://n1", "what was done", done=kind == "membership")

    def end(self, fault: Fault) -> None:
        self.done.append(f"end {fault.kind}")

    def heal(self) -> None:
        self.done.append("heal")


def nemesis(faults: Recording, kinds: list[str]) -> Nemesis:
    return Nemesis(faults, kinds, 60, random.Random(1), itertools.count(0, 1000).__next__, turn_s=0.001)


async def test_faults_come_one_at_a_time_each_ended_before_the_next_and_recorded() -> None:
    stop = asyncio.Event()
    faults = Recording(stop, 6)
    chaos = nemesis(faults, ["kill", "pause", "membership", "disk"])
    assert chaos.skipped == ["disk skipped: they need root"] and chaos.kinds == [
        "kill",
        "pause",
        "membership",
    ]
    await chaos.run(stop)
    await chaos.heal()
    began = [line for line in faults.done if line.startswith("begin")]
    assert len(began) == 6  # two rounds of the three kinds, each in an order of its own
    assert sorted(began[:3]) == sorted(began[3:]) == ["begin kill", "begin membership", "begin pause"]
    for before, after in itertools.pairwise(faults.done[:-1]):
        if before.startswith("begin") and not before.endswith("membership"):
            assert after == before.replace("begin", "end")  # ended before anything else begins
    assert faults.done[-1] == "heal"
    assert len(chaos.windows) == 6 and chaos.active is None
    assert all(fault.ended is not None and fault.started < fault.ended for fault in chaos.windows)


async def test_a_fault_that_cannot_be_injected_is_said_and_the_run_goes_on() -> None:
    stop = asyncio.Event()
    faults = Recording(stop, 3, failing="kill")
    chaos = nemesis(faults, ["kill"])
    await chaos.run(stop)
    assert chaos.errors == ["kill could not be injected: ip: cannot"] * 3 and chaos.windows == []


async def test_the_heal_ends_a_fault_left_under_way() -> None:
    faults = Recording(asyncio.Event(), 1)
    chaos = nemesis(faults, ["pause"])
    chaos.active = Fault("pause", "http://n1", "SIGSTOP")
    await chaos.heal()
    assert faults.done == ["end pause", "heal"] and chaos.active is None


def test_a_turn_is_an_eighth_of_the_run_within_bounds() -> None:
    assert (turn_seconds(4), turn_seconds(40), turn_seconds(3600)) == (1.0, 5.0, 15.0)
