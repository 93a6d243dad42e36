"""Fan-out strategies: how a coordinator asks a key's replicas, side by side behind one signature.

Each takes a :class:`Round` (the coordinator's side of one request: it starts one replica's call with a
callback told its outcome, and hears that outcome), the replicas in order, the quorum, and each replica's
group, and answers with the answers of the first ``ack`` replicas that succeeded, or fails with
:class:`QuorumFailed` once ``ack`` is out of reach. They differ only in how many calls are in flight. A
quorum that counts datacenters apart (``each_quorum``, a ``local_quorum`` write) counts each call in its
replica's group as well (``groups``: one per replica, empty where none is counted apart), and is reached
only once every group has its ack. A :class:`Fanout` (one per ``--fanout`` mode) pairs a strategy for
reads with one for writes; every mode's write asks all ``from`` replicas, and only reads may stop early.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from kvnode.coordinator.quorum import NO_GROUP, Quorum, QuorumTally
from kvnode.replica import Answered, answer_future
from kvnode.replica.errors import ReplicaDiskFull, ReplicaError

__all__ = [
    "FANOUTS",
    "Fanout",
    "Patient",
    "QuorumFailed",
    "Round",
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
R_contra = TypeVar("R_contra", bound=Patient, contravariant=True)


class Round(Protocol[R_contra, T]):
    """The coordinator's side of one fan-out, one object for all its calls (no callback or closure of
    its own per call). ``start`` starts one replica's call, whose outcome it tells ``answered`` (see
    kvnode.replica). ``ended`` is told every started call's outcome, late ones included, just before
    the verdict counts it: what the coordinator does around the verdict (hints, read repair). A bug in
    ``ended`` is logged, and the verdict still counts the call, so the request never hangs on it."""

    def start(self, replica: R_contra, answered: Answered[T], /) -> None: ...

    def ended(self, replica: R_contra, error: ReplicaError | None, answer: T, /) -> None: ...


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
    def __call__(
        self, round_: Round[Any, Any], replicas: Sequence[Any], quorum: Quorum, groups: Sequence[int] = ()
    ) -> Awaitable[list[Any]]: ...


@dataclass(frozen=True, slots=True)
class Fanout:
    read: Strategy
    write: Strategy
    nearest_first: bool = False  # reads ask this node's own replica first, a slow one last (coordinator)


def parallel(
    round_: Round[R, T], replicas: Sequence[R], quorum: Quorum, groups: Sequence[int] = ()
) -> asyncio.Future[list[T]]:
    """async: start every call at once, take answers in completion order, answer on the ack-th success
    and fail on the failure that puts ack out of reach. Calls still running are left to finish (a write
    goes on reaching more replicas) and their outcomes are consumed.

    This is ``asyncio.as_completed`` with the verdict taken as each outcome is told: the same behaviour
    without a Future, a done-callback and a turn of the loop per call (nor as_completed's queue and
    per-call coroutines), which are the costly part of it on the request path (docs/replica-channel.md).
    The caller awaits the verdict's Future itself: no coroutine of the fan-out's own.
    """
    assert replicas, "a fan-out needs at least one call"
    verdict: _Verdict[R, T] = _Verdict(round_, quorum, asyncio.get_running_loop())
    start = round_.start
    for index, replica in enumerate(replicas):
        # Each call's callback a partial (made in C, no __init__ of ours), told its outcome in _told.
        start(replica, partial(_told, verdict, replica, groups[index] if groups else NO_GROUP))
    return verdict.future


async def sequential(
    round_: Round[R, T],
    replicas: Sequence[R],
    quorum: Quorum,
    groups: Sequence[int] = (),
    *,
    ask_all: bool = False,
) -> list[T]:
    """sync: one replica after another, each awaited before the next is asked. The baseline. A read
    stops at the ack-th success; with ``ask_all`` (writes) every replica is asked, then the verdict."""
    loop = asyncio.get_running_loop()
    tally = QuorumTally(quorum)
    answers: list[T] = []
    errors: list[ReplicaError] = []
    for index, replica in enumerate(replicas):
        group = groups[index] if groups else NO_GROUP
        # ``ended`` is told before the awaiter, even after the request was cancelled: a read round closes.
        future: asyncio.Future[T] = answer_future(loop, partial(_start_ended, round_, replica))
        try:
            answers.append(await future)
            tally.succeed(group)
        except ReplicaError as error:
            errors.append(error)
            tally.fail(group)
        if not ask_all and (tally.reached or tally.impossible):
            break
    if tally.reached:
        return answers
    raise QuorumFailed(tally, errors)


def speculative(
    round_: Round[R, T], replicas: Sequence[R], quorum: Quorum, groups: Sequence[int] = ()
) -> asyncio.Future[list[T]]:
    """speculative (reads): ask the first ``ack`` replicas; each one that fails, or has not answered
    within its patience (a per-peer latency percentile, see PeerReplica.speculative_delay), brings in
    the next replica, once. Otherwise as ``parallel``: the ack-th success answers, and the failure that
    puts ack out of reach fails at once. Cassandra's speculative retry, per call. A quorum that counts
    datacenters apart asks every replica at once, as ``parallel``: the next replica in line may not be in
    the group that needs one."""
    if quorum.groups:
        return parallel(round_, replicas, quorum, groups)
    speculation: _Speculation[R, T] = _Speculation(round_, replicas, quorum, asyncio.get_running_loop())
    for _ in range(quorum.ack):
        speculation.start_next()
    return speculation.verdict.future


class _Verdict(Generic[R, T]):
    """One fan-out's round, its answers so far, and its outcome as soon as it is known."""

    __slots__ = ("answers", "errors", "future", "round", "tally")

    def __init__(self, round_: Round[R, T], quorum: Quorum, loop: asyncio.AbstractEventLoop) -> None:
        self.round = round_
        self.tally = QuorumTally(quorum)
        self.answers: list[T] = []
        self.errors: list[ReplicaError] = []
        self.future: asyncio.Future[list[T]] = loop.create_future()


def _told(verdict: _Verdict[R, T], replica: R, group: int, error: ReplicaError | None, answer: T) -> None:
    """One call's outcome (its replica in ``group``): to the round's ``ended``, then counted, the verdict
    settled at the ack-th success or at the failure that puts ack out of reach; an outcome told after that
    is only dropped."""
    try:
        verdict.round.ended(replica, error, answer)
    except Exception:
        log.exception("after a call to a replica")
    future = verdict.future
    if future.done():
        return
    if error is None:
        verdict.answers.append(answer)
        if verdict.tally.succeed(group):
            future.set_result(verdict.answers)
    else:
        verdict.errors.append(error)
        if verdict.tally.fail(group):
            future.set_exception(QuorumFailed(verdict.tally, verdict.errors))


def _start_ended(round_: Round[R, T], replica: R, answered: Answered[T]) -> None:
    """Start a call of ``sequential``, whose outcome goes to the round's ``ended``, then to ``answered``
    (its awaiter)."""
    round_.start(replica, partial(_ended_then, round_, replica, answered))


def _ended_then(
    round_: Round[R, T], replica: R, answered: Answered[T], error: ReplicaError | None, answer: T
) -> None:
    try:
        round_.ended(replica, error, answer)
    except Exception:
        log.exception("after a call to a replica")
    answered(error, answer)


class _Speculation(Generic[R, T]):
    """One speculative read: its verdict, the replicas not yet asked, and the asking of the next one."""

    __slots__ = ("_loop", "_upcoming", "verdict")

    def __init__(
        self, round_: Round[R, T], replicas: Sequence[R], quorum: Quorum, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._loop = loop
        self._upcoming = iter(replicas)
        self.verdict: _Verdict[R, T] = _Verdict(round_, quorum, loop)

    def start_next(self) -> None:
        replica = next(self._upcoming, None)
        if replica is None:
            return
        attempt = _Attempt(self, replica)
        self.verdict.round.start(replica, attempt)
        if not attempt.over:  # a local replica has answered already: no patience to keep
            attempt.timer = self._loop.call_later(replica.speculative_delay(), attempt.late)


class _Attempt(Generic[R, T]):
    """One call of a speculative read (its callback): whether it has ended, its patience timer, and
    whether it has brought in another replica (each call does at most once: late, or failed)."""

    __slots__ = ("over", "replaced", "replica", "speculation", "timer")

    def __init__(self, speculation: _Speculation[R, T], replica: R) -> None:
        self.speculation = speculation
        self.replica = replica
        self.over = False
        self.replaced = False
        self.timer: asyncio.TimerHandle | None = None

    def __call__(self, error: ReplicaError | None, answer: T) -> None:
        self.over = True
        if self.timer is not None:
            self.timer.cancel()
        verdict = self.speculation.verdict
        _told(verdict, self.replica, NO_GROUP, error, answer)
        if error is not None and not self.replaced and not verdict.future.done():
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
