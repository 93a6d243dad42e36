"""In-process replicas for coordinator and read-repair tests: the real LocalReplica on real Storage, a
scripted replica (same Replica protocol, same storage underneath) that fails or answers late on cue, and
a Coordinator over them; and a node's answers to its peers' calls (kvnode.replica.storage_calls)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock, wall_clock_us
from kvnode.clocks.offsets import ClockOffsets
from kvnode.config import FanoutMode
from kvnode.coordinator.coordinator import Coordinator
from kvnode.coordinator.fanout import FANOUTS
from kvnode.replica import Answered, AwaitableCalls, Forwarder, Replica
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.clock_probe import ClockAnswers
from kvnode.replica.errors import ReplicaError
from kvnode.replica.hints import HintStore
from kvnode.replica.local import LocalReplica
from kvnode.replica.readiness import NodeState
from kvnode.replica.storage_calls import StorageCalls
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record
from kvnode.storage.system_db import SystemDb
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership


def unjudged_fence() -> ClockFence:
    """A fence with no peers to measure: never fenced, and it judges records by the local wall clock."""
    return ClockFence(wall_clock_us(), 5_000_000, ClockOffsets(max_age_s=10.0), peers=0)


def storage_answerers(storage: Storage, fence: ClockFence | None = None) -> tuple[Answerers, ClockAnswers]:
    """A node's answers to its storage's calls and to CLOCK (kvnode.replica.storage_calls, clock_probe),
    its fence unjudged unless given, its data serving; and its clock's answers, which a clock ping's pong
    carries."""
    fence = fence or unjudged_fence()
    answerers, clock = Answerers(), ClockAnswers(fence, lambda: NodeState.SERVING)
    StorageCalls(storage, HybridClock(wall_clock_us(), 5_000_000), fence, lambda: NodeState.SERVING).register(
        answerers
    )
    clock.register(answerers)
    return answerers, clock


class ScriptedReplica(AwaitableCalls):
    """A peer as the coordinator sees it, answering from its own real storage unless told otherwise:
    ``fail_with`` fails every call at once, ``holding`` keeps calls unanswered until ``release``, and
    ``connected`` is what the coordinator reads before a write (False: hinted at dispatch)."""

    def __init__(self, url: str, storage: Storage) -> None:
        self.url = url
        self.storage = storage
        self._loop = asyncio.get_running_loop()
        self._store = LocalReplica(url, storage, unjudged_fence())
        self.connected = True
        self.lagging = False
        self.forwarder: Forwarder | None = None  # a scripted peer forwards nothing unless given one
        self.fail_with: ReplicaError | None = None
        self.holding = False
        self._held: list[Callable[[ReplicaError | None], None]] = []
        self.writes: list[tuple[bytes, Record]] = []
        self.reads: list[bytes] = []

    def speculative_delay(self) -> float:
        return 0.05

    def down_for(self) -> float:
        return 0.0 if self.connected else 1.0

    def read_then(self, key: bytes, answered: Answered[Record | None]) -> None:
        self.reads.append(key)
        self._answer(partial(self._store.read_then, key), answered)

    def write_then(
        self, key: bytes, record: Record, answered: Answered[int | None], encoded: bytes | None = None
    ) -> None:
        self.writes.append((key, record))
        self._answer(partial(self._store.write_then, key, record, encoded=encoded), answered)

    def release(self, error: ReplicaError | None = None) -> None:
        """Answer every held call, in call order (or fail each with ``error``)."""
        held, self._held = self._held, []
        for answer in held:
            answer(error)

    def _answer(self, run: Callable[[Answered[Any]], None], answered: Answered[Any]) -> None:
        if self.fail_with is not None:
            answered(self.fail_with, None)
        elif self.holding:
            self._held.append(partial(_answer_held, run, answered))
        else:
            run(answered)


def _answer_held(
    run: Callable[[Answered[Any]], None], answered: Answered[Any], error: ReplicaError | None
) -> None:
    if error is None:
        run(answered)
    else:
        answered(error, None)


async def run_callbacks() -> None:
    """Let the callbacks and task steps made ready so far run (an awaiter resumes on a later turn)."""
    for _ in range(5):
        await asyncio.sleep(0)


@contextmanager
def storages(tmp_path: Path, names: list[str]) -> Iterator[list[Storage]]:
    """One real Storage per name under ``tmp_path``, closed at the end."""
    opened = [Storage.open(tmp_path / name, fsync=False) for name in names]
    try:
        yield opened
    finally:
        for storage in opened:
            storage.close()


URLS = ["http://a:1", "http://b:1", "http://c:1"]


@dataclass
class CoordinatorNode:
    """A coordinator on http://a:1 and what it reaches: its own storage and two scripted peers."""

    coordinator: Coordinator
    clock: HybridClock
    hints: HintStore
    storages: dict[str, Storage]
    b: ScriptedReplica
    c: ScriptedReplica

    def held(self, url: str, key: bytes) -> Record | None:
        return self.storages[url].read(key)


@contextmanager
def coordinator_node(
    tmp_path: Path, fanout: FanoutMode = "async", membership: Membership | None = None
) -> Iterator[CoordinatorNode]:
    """The coordinator of http://a:1 in ``membership`` (by default URLS, each owning every key)."""
    with storages(tmp_path, ["a", "b", "c"]) as (a, b, c):
        local = LocalReplica(URLS[0], a, unjudged_fence())
        peers = ScriptedReplica(URLS[1], b), ScriptedReplica(URLS[2], c)
        membership = membership or Membership.seeded(URLS)
        epoch: Epoch[Replica] = Epoch(URLS[0], membership, dict(zip(URLS[1:], peers, strict=True)), 0)
        clock = HybridClock(wall_clock_us(), max_skew_us=5_000_000)
        system = SystemDb.open(tmp_path / "a-system")
        hints = HintStore(system.hints, fsync=False, max_per_peer=100, window_s=3600, grace_s=864000)
        coordinator = Coordinator(epoch, FANOUTS[fanout], clock, hints, local, unjudged_fence())
        try:
            yield CoordinatorNode(coordinator, clock, hints, dict(zip(URLS, (a, b, c), strict=True)), *peers)
        finally:
            system.close()
