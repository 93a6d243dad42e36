"""Fan-out strategies: how a coordinator asks a key's replicas, side by side behind one signature.

Each takes the replica calls in order (each a :class:`CallStarter`, which starts one call) and the quorum, and
returns the answers of the first ``ack`` replicas that succeeded, or raises :class:`QuorumFailed` once
``ack`` is out of reach. They differ only in how many calls are in flight. A :class:`Fanout` (one per
``--fanout`` mode) pairs a strategy for reads with one for writes; every mode's write asks all ``from``
replicas, and only reads may stop early.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from kvnode.coordinator.quorum import Quorum, QuorumTally
from kvnode.replica.errors import ReplicaDiskFull, ReplicaError

__all__ = [
    "FANOUTS",
    "CallStarter",
    "Fanout",
    "Patient",
    "QuorumFailed",
    "Strategy",
    "parallel",
    "sequential",
    "speculative",
]

T = TypeVar("T")


class Patient(Protocol):
    """A replica as a speculative read sees it: how long to wait for it before asking one more."""

    def speculative_delay(self) -> float: ...


R = TypeVar("R", bound=Patient)


class CallStarter(Generic[R, T]):
    """Starts one replica call for a fan-out: the future ends in the answer or a ReplicaError (see
    kvnode.replica), and knows the replica's patience. ``start`` and ``ended`` take the replica, so one
    function of each serves a whole fan-out.

    ``ended(replica, future)``, when given, is told every started call's outcome, late ones included. The
    strategy calls it from its own completion callback for the call, so what the coordinator does around
    the verdict (hints, read repair) costs no callback of its own: asyncio schedules each one apart."""

    __slots__ = ("_ended", "_replica", "_start")

    def __init__(
        self,
        start: Callable[[R], asyncio.Future[T]],
        replica: R,
        ended: Callable[[R, asyncio.Future[T]], None] | None = None,
    ) -> None:
        self._start = start
        self._replica = replica
        self._ended = ended

    def __call__(self) -> asyncio.Future[T]:
        return self._start(self._replica)

    def ended(self, future: asyncio.Future[T]) -> None:
        """The call's future is done (its outcome, for ``ended``)."""
        if self._ended is not None:
            self._ended(self._replica, future)

    @property
    def patience(self) -> float:
        """Seconds a speculative read waits for this call's answer before it asks one more replica."""
        return self._replica.speculative_delay()


class QuorumFailed(Exception):
    """Fewer than ack replicas succeeded; the message names the quorum and the replicas' errors.
    ``disk_full``: a replica failed because its disk is full."""

    def __init__(self, tally: QuorumTally, errors: list[ReplicaError]) -> None:
        self.disk_full = any(isinstance(error, ReplicaDiskFull) for error in errors)
        quorum = tally.quorum
        detail = "; ".join(" ".join(str(error).split()) for error in errors)  # a peer's text may span lines
        super().__init__(
            f"{tally.successes} of {quorum.replicas} replicas answered, {quorum.ack} needed: {detail}"
        )


class Strategy(Protocol):
    async def __call__(self, calls: Sequence[CallStarter[Any, Any]], quorum: Quorum) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class Fanout:
    read: Strategy
    write: Strategy
    nearest_first: bool = False  # reads ask this node's own replica first, a slow one last (coordinator)


async def parallel(calls: Sequence[CallStarter[Any, T]], quorum: Quorum) -> list[T]:
    """async: start every call at once, take answers in completion order, return on the ack-th success
    and fail on the failure that puts ack out of reach. Calls still running are left to finish (a write
    goes on reaching more replicas) and their outcomes are consumed.

    This is ``asyncio.as_completed`` with the verdict taken inside the completion callbacks: the same
    behaviour without as_completed's queue and per-call coroutines, which are the costly part of it on
    the request path (docs/replica-channel.md).
    """
    verdict: _Verdict[T] | None = None
    for call in calls:
        future = call()
        if verdict is None:
            # The loop from a call's future: asyncio.get_running_loop() makes a getpid() system call on
            # Python 3.11.
            verdict = _Verdict(quorum, future.get_loop())
        if future.done():
            _settle(call, verdict.take, future)
        else:
            future.add_done_callback(partial(_settle, call, verdict.take))
    assert verdict is not None, "a fan-out needs at least one call"
    return await verdict.future


async def sequential(
    calls: Sequence[CallStarter[Any, T]], quorum: Quorum, *, ask_all: bool = False
) -> list[T]:
    """sync: one replica after another, each awaited before the next is asked. The baseline. A read
    stops at the ack-th success; with ``ask_all`` (writes) every replica is asked, then the verdict."""
    tally = QuorumTally(quorum)
    answers: list[T] = []
    errors: list[ReplicaError] = []
    for call in calls:
        future = call()
        try:
            answers.append(await future)
            tally.succeed()
        except ReplicaError as error:
            errors.append(error)
            tally.fail()
        finally:
            call.ended(future)
        if not ask_all and (tally.reached or tally.impossible):
            break
    if tally.reached:
        return answers
    raise QuorumFailed(tally, errors)


async def speculative(calls: Sequence[CallStarter[Any, T]], quorum: Quorum) -> list[T]:
    """speculative (reads): ask the first ``ack`` replicas; each one that fails, or has not answered
    within its patience (a per-peer latency percentile, see PeerReplica.speculative_delay), brings in
    the next replica, once. Otherwise as ``parallel``: the ack-th success answers, and the failure that
    puts ack out of reach fails at once. Cassandra's speculative retry, per call."""
    loop = asyncio.get_running_loop()
    verdict: _Verdict[T] = _Verdict(quorum, loop)
    upcoming = iter(calls)

    def start_next() -> None:
        call = next(upcoming, None)
        if call is None:
            return
        future = call()
        replaced = [False]  # whether this call already brought in another replica
        timer = None if future.done() else loop.call_later(call.patience, late, future, replaced)
        future.add_done_callback(partial(settle, call, timer, replaced))

    def late(future: asyncio.Future[T], replaced: list[bool]) -> None:
        if not verdict.future.done() and not future.done():
            replaced[0] = True
            start_next()

    def settle(
        call: CallStarter[Any, T],
        timer: asyncio.TimerHandle | None,
        replaced: list[bool],
        future: asyncio.Future[T],
    ) -> None:
        if timer is not None:
            timer.cancel()
        call.ended(future)
        if verdict.take(future) and not replaced[0] and not verdict.future.done():
            replaced[0] = True
            start_next()

    for _ in range(quorum.ack):
        start_next()
    return await verdict.future


class _Verdict(Generic[T]):
    """One fan-out's answers so far, and its outcome as soon as it is known."""

    __slots__ = ("answers", "errors", "future", "tally")

    def __init__(self, quorum: Quorum, loop: asyncio.AbstractEventLoop) -> None:
        self.tally = QuorumTally(quorum)
        self.answers: list[T] = []
        self.errors: list[ReplicaError] = []
        self.future: asyncio.Future[list[T]] = loop.create_future()

    def take(self, call: asyncio.Future[T]) -> bool:
        """Count one call's outcome (a completion callback); whether it was a failed replica. Settles
        the outcome at the ack-th success, or at the failure that puts ack out of reach."""
        if self.future.done():
            _retrieve(call)
            return False
        failed = False
        try:
            self.answers.append(call.result())
            self.tally.succeed()
        except ReplicaError as error:
            self.errors.append(error)
            self.tally.fail()
            failed = True
        except Exception as error:  # a bug, not a failed replica: the request fails (500), never hangs
            self.future.set_exception(error)
            return False
        if self.tally.reached:
            self.future.set_result(self.answers)
        elif self.tally.impossible:
            self.future.set_exception(QuorumFailed(self.tally, self.errors))
        return failed


def _settle(
    call: CallStarter[Any, T], take: Callable[[asyncio.Future[T]], bool], future: asyncio.Future[T]
) -> None:
    """A call's one completion callback: its outcome to the call's ``ended``, then to the verdict."""
    call.ended(future)
    take(future)


def _retrieve(future: asyncio.Future[T]) -> None:
    """Mark an abandoned call's outcome as seen, so asyncio does not warn that it was never retrieved."""
    if not future.cancelled():
        future.exception()


FANOUTS: dict[str, Fanout] = {
    "async": Fanout(read=parallel, write=parallel),
    "sync": Fanout(read=sequential, write=partial(sequential, ask_all=True)),
    "speculative": Fanout(read=speculative, write=parallel, nearest_first=True),
}
