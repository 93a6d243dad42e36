"""Fan-out strategies: how a coordinator asks a key's replicas, side by side behind one signature.

Each takes the replica calls in order (each a :class:`CallStarter`, which starts one call with a callback
told its outcome) and the quorum, and returns the answers of the first ``ack`` replicas that succeeded, or
raises :class:`QuorumFailed` once ``ack`` is out of reach. They differ only in how many calls are in flight.
A quorum that counts datacenters apart (``each_quorum``, a ``local_quorum`` write) counts each call in its
replica's group as well (the call's ``group``), and is reached only once every group has its ack.
A :class:`Fanout` (one per ``--fanout`` mode) pairs a strategy for reads with one for writes; every mode's
write asks all ``from`` replicas, and only reads may stop early.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from kvnode.coordinator.quorum import NO_GROUP, Quorum, QuorumTally
from kvnode.replica import Answered, answer_future
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

log = logging.getLogger(__name__)

T = TypeVar("T")


class Patient(Protocol):
    """A replica as a speculative read sees it: how long to wait for it before asking one more."""

    def speculative_delay(self) -> float: ...


R = TypeVar("R", bound=Patient)


class CallStarter(Generic[R, T]):
    """Starts one replica call for a fan-out, whose outcome it tells the callback it is given (see
    kvnode.replica), and knows the replica's patience. ``start`` and ``ended`` take the replica, so one
    function of each serves a whole fan-out.

    ``ended(replica, error, answer)``, when given, is told every started call's outcome, late ones
    included, just before the verdict counts it: what the coordinator does around the verdict (hints,
    read repair) costs no callback of its own."""

    __slots__ = ("_ended", "_replica", "_start", "group")

    def __init__(
        self,
        start: Callable[[R, Answered[T]], None],
        replica: R,
        ended: Callable[[R, ReplicaError | None, T], None] | None = None,
        group: int = NO_GROUP,
    ) -> None:
        self._start = start
        self._replica = replica
        self._ended = ended
        self.group = group  # its replica's datacenter among the quorum's groups (NO_GROUP: none)

    def __call__(self, answered: Answered[T]) -> None:
        self._start(self._replica, answered)

    def ended(self, error: ReplicaError | None, answer: T) -> None:
        """The call's outcome, for ``ended``. A bug there is logged, and the verdict still counts the
        call, so the request never hangs on it."""
        if self._ended is not None:
            try:
                self._ended(self._replica, error, answer)
            except Exception:
                log.exception("after a call to a replica")

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
            f"{tally.successes} of {quorum.copies} replicas answered, {quorum.ack} needed"
            f"{tally.shortfall()}: {detail}"
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

    This is ``asyncio.as_completed`` with the verdict taken as each outcome is told: the same behaviour
    without a Future, a done-callback and a turn of the loop per call (nor as_completed's queue and
    per-call coroutines), which are the costly part of it on the request path (docs/replica-channel.md).
    """
    assert calls, "a fan-out needs at least one call"
    verdict: _Verdict[T] = _Verdict(quorum, asyncio.get_running_loop())
    for call in calls:
        call(partial(_settle, call, verdict))
    return await verdict.future


async def sequential(
    calls: Sequence[CallStarter[Any, T]], quorum: Quorum, *, ask_all: bool = False
) -> list[T]:
    """sync: one replica after another, each awaited before the next is asked. The baseline. A read
    stops at the ack-th success; with ``ask_all`` (writes) every replica is asked, then the verdict."""
    loop = asyncio.get_running_loop()
    tally = QuorumTally(quorum)
    answers: list[T] = []
    errors: list[ReplicaError] = []
    for call in calls:
        future: asyncio.Future[T] = answer_future(loop, partial(_start_told, call))
        try:
            answers.append(await future)
            tally.succeed(call.group)
        except ReplicaError as error:
            errors.append(error)
            tally.fail(call.group)
        if not ask_all and (tally.reached or tally.impossible):
            break
    if tally.reached:
        return answers
    raise QuorumFailed(tally, errors)


async def speculative(calls: Sequence[CallStarter[Any, T]], quorum: Quorum) -> list[T]:
    """speculative (reads): ask the first ``ack`` replicas; each one that fails, or has not answered
    within its patience (a per-peer latency percentile, see PeerReplica.speculative_delay), brings in
    the next replica, once. Otherwise as ``parallel``: the ack-th success answers, and the failure that
    puts ack out of reach fails at once. Cassandra's speculative retry, per call. A quorum that counts
    datacenters apart asks every replica at once, as ``parallel``: the next replica in line may not be in
    the group that needs one."""
    if quorum.groups:
        return await parallel(calls, quorum)
    speculation: _Speculation[T] = _Speculation(calls, quorum, asyncio.get_running_loop())
    for _ in range(quorum.ack):
        speculation.start_next()
    return await speculation.verdict.future


class _Verdict(Generic[T]):
    """One fan-out's answers so far, and its outcome as soon as it is known."""

    __slots__ = ("answers", "errors", "future", "tally")

    def __init__(self, quorum: Quorum, loop: asyncio.AbstractEventLoop) -> None:
        self.tally = QuorumTally(quorum)
        self.answers: list[T] = []
        self.errors: list[ReplicaError] = []
        self.future: asyncio.Future[list[T]] = loop.create_future()

    def take(self, error: ReplicaError | None, answer: T, group: int) -> bool:
        """Count one call's outcome (its replica in ``group``); whether it was a failed replica. Settles the
        outcome at the ack-th success, or at the failure that puts ack out of reach; one told after that
        is only dropped."""
        future, tally = self.future, self.tally
        if future.done():
            return False
        if error is None:
            self.answers.append(answer)
            tally.succeed(group)
            if tally.reached:
                future.set_result(self.answers)
            return False
        self.errors.append(error)
        tally.fail(group)
        if tally.impossible:
            future.set_exception(QuorumFailed(tally, self.errors))
        return True


def _settle(call: CallStarter[Any, T], verdict: _Verdict[T], error: ReplicaError | None, answer: T) -> None:
    """A call's outcome (its callback in ``parallel``): to the call's ``ended``, then to the verdict."""
    call.ended(error, answer)
    verdict.take(error, answer, call.group)


def _start_told(call: CallStarter[Any, T], answered: Answered[T]) -> None:
    """Start a call of ``sequential``, whose outcome goes to the call's ``ended``, then to ``answered``
    (its awaiter). ``ended`` is told even after the request was cancelled, so that a read round closes."""
    call(partial(_ended_then, call, answered))


def _ended_then(
    call: CallStarter[Any, T], answered: Answered[T], error: ReplicaError | None, answer: T
) -> None:
    call.ended(error, answer)
    answered(error, answer)


class _Speculation(Generic[T]):
    """One speculative read: its verdict, the calls not yet started, and the starting of the next one."""

    __slots__ = ("_loop", "_upcoming", "verdict")

    def __init__(
        self, calls: Sequence[CallStarter[Any, T]], quorum: Quorum, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._loop = loop
        self._upcoming = iter(calls)
        self.verdict: _Verdict[T] = _Verdict(quorum, loop)

    def start_next(self) -> None:
        call = next(self._upcoming, None)
        if call is None:
            return
        attempt = _Attempt(self, call)
        call(attempt.answered)
        if not attempt.over:  # a local replica has answered already: no patience to keep
            attempt.timer = self._loop.call_later(call.patience, attempt.late)


class _Attempt(Generic[T]):
    """One call of a speculative read: whether it has ended, its patience timer, and whether it has
    brought in another replica (each call does at most once: late, or failed)."""

    __slots__ = ("call", "over", "replaced", "speculation", "timer")

    def __init__(self, speculation: _Speculation[T], call: CallStarter[Any, T]) -> None:
        self.speculation = speculation
        self.call = call
        self.over = False
        self.replaced = False
        self.timer: asyncio.TimerHandle | None = None

    def answered(self, error: ReplicaError | None, answer: T) -> None:
        self.over = True
        if self.timer is not None:
            self.timer.cancel()
        self.call.ended(error, answer)
        verdict = self.speculation.verdict
        if verdict.take(error, answer, self.call.group) and not self.replaced and not verdict.future.done():
            self.replaced = True
            self.speculation.start_next()

    def late(self) -> None:
        """Its patience ran out before its answer came."""
        if not self.speculation.verdict.future.done():
            self.replaced = True
            self.speculation.start_next()


FANOUTS: dict[str, Fanout] = {
    "async": Fanout(read=parallel, write=parallel),
    "sync": Fanout(read=sequential, write=partial(sequential, ask_all=True)),
    "speculative": Fanout(read=speculative, write=parallel, nearest_first=True),
}
