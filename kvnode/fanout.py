"""Fan-out strategies: how a coordinator asks a key's replicas, side by side behind one signature.

Both take the replica calls in placement order (each a function that starts one call) and the quorum,
and return the answers of the first ``ack`` replicas that succeeded, or raise :class:`QuorumFailed` as
soon as ``ack`` is out of reach. They differ only in how many calls are in flight at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from kvnode.quorum import Quorum, QuorumTally
from kvnode.transport import ReplicaError

__all__ = ["FANOUTS", "Fanout", "QuorumFailed", "parallel", "sequential"]

T = TypeVar("T")
# Starts one replica call; the future ends in the answer or a ReplicaError (see kvnode.transport).
ReplicaCall = Callable[[], asyncio.Future[T]]


class QuorumFailed(Exception):
    """Fewer than ack replicas succeeded; the message names the quorum and the replicas' errors."""

    def __init__(self, tally: QuorumTally, errors: list[ReplicaError]) -> None:
        quorum = tally.quorum
        detail = "; ".join(str(error) for error in errors)
        super().__init__(
            f"{tally.successes} of {quorum.replicas} replicas answered, {quorum.ack} needed: {detail}"
        )


class Fanout(Protocol):
    async def __call__(self, calls: Sequence[ReplicaCall[T]], quorum: Quorum) -> list[T]: ...


async def parallel(calls: Sequence[ReplicaCall[T]], quorum: Quorum) -> list[T]:
    """async: start every call at once; return on the ack-th success, fail on the failure that makes
    ack unreachable. Calls still running are left to finish (a write keeps reaching more replicas)."""
    tally = QuorumTally(quorum)
    answers: list[T] = []
    errors: list[ReplicaError] = []
    running = [call() for call in calls]
    try:
        for finished in asyncio.as_completed(running):
            try:
                answers.append(await finished)
                tally.succeed()
            except ReplicaError as error:
                errors.append(error)
                tally.fail()
            if tally.reached:
                return answers
            if tally.impossible:
                raise QuorumFailed(tally, errors)
    finally:
        for future in running:
            if future.done():
                _retrieve(future)
            else:
                future.add_done_callback(_retrieve)
    raise AssertionError("unreachable: every call ended without a verdict")


async def sequential(calls: Sequence[ReplicaCall[T]], quorum: Quorum) -> list[T]:
    """sync: one replica after another, each awaited before the next is asked. The baseline."""
    tally = QuorumTally(quorum)
    answers: list[T] = []
    errors: list[ReplicaError] = []
    for call in calls:
        try:
            answers.append(await call())
            tally.succeed()
        except ReplicaError as error:
            errors.append(error)
            tally.fail()
        if tally.reached:
            return answers
        if tally.impossible:
            break
    raise QuorumFailed(tally, errors)


def _retrieve(future: asyncio.Future[T]) -> None:
    """Mark an abandoned call's outcome as seen, so asyncio does not warn that it was never retrieved."""
    if not future.cancelled():
        future.exception()


FANOUTS: dict[str, Fanout] = {"async": parallel, "sync": sequential}
