"""kvnode.coordinator.fanout's strategies (parallel, sequential, speculative) and modes, driven with
hand-resolved
futures."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable

import pytest

from kvnode.coordinator.fanout import FANOUTS, CallStarter, QuorumFailed, parallel, sequential, speculative
from kvnode.coordinator.quorum import Quorum
from kvnode.replica.errors import ReplicaError, ReplicaTimeout, ReplicaUnavailable

NEVER_RETRIEVED = "exception was never retrieved"


class PatientReplica:
    """A replica as a fan-out sees it: only its patience, which the test sets."""

    def __init__(self, patience: float) -> None:
        self.patience = patience

    def speculative_delay(self) -> float:
        return self.patience


HandCall = CallStarter[PatientReplica, str]


def hand_call(start: Callable[[], asyncio.Future[str]], patience: float = 3600.0) -> HandCall:
    """One replica call: starts (creates) its future through ``start``."""
    return CallStarter(lambda _: start(), PatientReplica(patience))


def returning(future: asyncio.Future[str]) -> HandCall:
    return hand_call(lambda: future)


class HandCalls:
    """Replica calls whose futures the test resolves itself; records which calls were started."""

    def __init__(self, count: int, patience: float = 3600.0) -> None:
        self.futures: list[asyncio.Future[str] | None] = [None] * count
        self.patience = patience

    @property
    def calls(self) -> list[HandCall]:
        return [self._starter(index) for index in range(len(self.futures))]

    @property
    def started(self) -> list[int]:
        return [index for index, future in enumerate(self.futures) if future is not None]

    def future(self, index: int) -> asyncio.Future[str]:
        future = self.futures[index]
        assert future is not None, f"call {index} was not started"
        return future

    def succeed(self, index: int) -> None:
        self.future(index).set_result(f"answer-{index}")

    def fail(self, index: int, error: ReplicaError | None = None) -> None:
        self.future(index).set_exception(error or ReplicaUnavailable(f"replica {index} is down"))

    def _starter(self, index: int) -> HandCall:
        def start() -> asyncio.Future[str]:
            assert self.futures[index] is None, f"call {index} started twice"
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self.futures[index] = future
            return future

        return hand_call(start, self.patience)


async def settle(rounds: int = 10) -> None:
    """Let every ready callback and task step run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def spawn(awaitable: Awaitable[list[str]]) -> asyncio.Task[list[str]]:
    async def run() -> list[str]:
        return await awaitable

    return asyncio.get_running_loop().create_task(run())


def never_retrieved(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if NEVER_RETRIEVED in record.getMessage()]


async def test_parallel_starts_every_call_at_once() -> None:
    hand = HandCalls(3)
    task = spawn(parallel(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    assert hand.started == [0, 1, 2]
    assert not task.done()
    for index in range(3):
        hand.succeed(index)
    assert len(await task) == 2


async def test_parallel_returns_on_the_ack_th_success_without_waiting_for_the_rest() -> None:
    hand = HandCalls(3)
    task = spawn(parallel(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.succeed(2)
    await settle()
    assert not task.done()
    hand.succeed(0)
    await settle()
    assert task.done()
    assert task.result() == ["answer-2", "answer-0"]  # in the order they finished
    assert not hand.future(1).done()
    hand.succeed(1)


async def test_parallel_counts_failures_and_still_reaches_ack() -> None:
    hand = HandCalls(3)
    task = spawn(parallel(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.fail(0)
    await settle()
    assert not task.done()
    hand.succeed(1)
    await settle()
    assert not task.done()
    hand.succeed(2)
    assert await task == ["answer-1", "answer-2"]


async def test_parallel_fails_as_soon_as_ack_is_out_of_reach() -> None:
    hand = HandCalls(3)
    task = spawn(parallel(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.fail(1, ReplicaTimeout("replica 1 did not answer"))
    await settle()
    assert not task.done()  # 3 - 1 failures = 2 >= ack: still reachable
    hand.fail(0)
    await settle()
    assert task.done()  # 3 - 2 failures = 1 < ack, though call 2 is still running
    assert not hand.future(2).done()
    with pytest.raises(QuorumFailed) as raised:
        task.result()
    message = str(raised.value)
    assert "0 of 3 replicas answered, 2 needed" in message
    assert "replica 1 did not answer" in message and "replica 0 is down" in message
    hand.succeed(2)


async def test_parallel_with_ack_equal_from_fails_on_the_first_failure() -> None:
    hand = HandCalls(3)
    task = spawn(parallel(hand.calls, Quorum(ack=3, replicas=3)))
    await settle()
    hand.succeed(0)
    await settle()
    hand.fail(2)
    await settle()
    assert task.done()
    with pytest.raises(QuorumFailed, match="1 of 3 replicas answered, 3 needed"):
        task.result()
    hand.succeed(1)


async def test_parallel_handles_calls_that_finish_at_once() -> None:
    """A local replica's future is already done when the call returns."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    done.set_result("local")
    pending: asyncio.Future[str] = loop.create_future()
    pending_two: asyncio.Future[str] = loop.create_future()
    task = spawn(
        parallel([returning(done), returning(pending), returning(pending_two)], Quorum(ack=2, replicas=3))
    )
    await settle()
    assert not task.done()
    pending_two.set_result("peer")
    assert await task == ["local", "peer"]
    pending.set_result("late")


async def test_sequential_starts_each_call_after_the_previous_finished_and_stops_at_ack() -> None:
    hand = HandCalls(3)
    task = spawn(sequential(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    assert hand.started == [0]
    hand.succeed(0)
    await settle()
    assert hand.started == [0, 1]
    assert not task.done()
    hand.succeed(1)
    await settle()
    assert task.done()
    assert task.result() == ["answer-0", "answer-1"]
    assert hand.started == [0, 1]  # the third replica is never asked


async def test_sequential_moves_past_a_failure() -> None:
    hand = HandCalls(3)
    task = spawn(sequential(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.fail(0)
    await settle()
    assert hand.started == [0, 1]
    hand.succeed(1)
    await settle()
    assert hand.started == [0, 1, 2]
    assert not task.done()
    hand.succeed(2)
    assert await task == ["answer-1", "answer-2"]


async def test_sequential_fails_as_soon_as_ack_is_out_of_reach() -> None:
    hand = HandCalls(3)
    task = spawn(sequential(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.fail(0)
    await settle()
    hand.fail(1)
    await settle()
    assert task.done()
    assert hand.started == [0, 1]  # no point asking the third
    with pytest.raises(QuorumFailed, match="0 of 3 replicas answered, 2 needed"):
        task.result()


async def test_sequential_with_all_replicas_failing_reports_every_error() -> None:
    hand = HandCalls(2)
    task = spawn(sequential(hand.calls, Quorum(ack=1, replicas=2)))
    await settle()
    hand.fail(0)
    await settle()
    hand.fail(1)
    with pytest.raises(QuorumFailed) as raised:
        await task
    assert "replica 0 is down" in str(raised.value) and "replica 1 is down" in str(raised.value)


class NotAReplicaError(Exception):
    pass


async def test_parallel_fails_on_an_unexpected_error_instead_of_hanging() -> None:
    hand = HandCalls(3)
    task = spawn(parallel(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.future(0).set_exception(NotAReplicaError("a bug"))
    await settle()
    assert task.done()
    with pytest.raises(NotAReplicaError):
        task.result()
    hand.succeed(1)
    hand.succeed(2)


async def test_sequential_fails_on_an_unexpected_error_instead_of_hanging() -> None:
    hand = HandCalls(3)
    task = spawn(sequential(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.future(0).set_exception(NotAReplicaError("a bug"))
    with pytest.raises(NotAReplicaError):
        await task
    assert hand.started == [0]


async def test_sync_writes_ask_every_replica_in_turn_even_after_ack() -> None:
    hand = HandCalls(3)
    task = spawn(FANOUTS["sync"].write(hand.calls, Quorum(ack=2, replicas=3)))
    for index in range(3):
        await settle()
        assert hand.started == list(range(index + 1))  # one at a time
        assert not task.done()
        hand.succeed(index)
    assert await task == ["answer-0", "answer-1", "answer-2"]


async def test_sync_writes_answer_after_asking_all_when_ack_is_reached_despite_a_failure() -> None:
    hand = HandCalls(3)
    task = spawn(FANOUTS["sync"].write(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.fail(0)
    await settle()
    hand.succeed(1)
    await settle()
    assert not task.done()  # the third replica is still asked
    hand.succeed(2)
    assert await task == ["answer-1", "answer-2"]


async def test_every_mode_writes_to_every_replica() -> None:
    for mode, fanout in FANOUTS.items():
        hand = HandCalls(3)
        task = spawn(fanout.write(hand.calls, Quorum(ack=1, replicas=3)))
        for index in range(3):
            await settle()
            if index < len(hand.started):
                hand.succeed(index)
        await task
        await settle()
        assert hand.started == [0, 1, 2], mode


async def test_never_retrieved_detection_works(caplog: pytest.LogCaptureFixture) -> None:
    """The control for the tests below: an abandoned failed future does log, and caplog sees it."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    future.set_exception(ReplicaUnavailable("nobody looks at me"))
    del future
    gc.collect()
    assert never_retrieved(caplog)


Scenario = Callable[[HandCalls, asyncio.Task[list[str]]], Awaitable[None]]


async def _won_early(hand: HandCalls, task: asyncio.Task[list[str]]) -> None:
    hand.succeed(0)
    hand.succeed(1)
    await settle()
    assert task.done() and task.result() == ["answer-0", "answer-1"]


async def _lost_early(hand: HandCalls, task: asyncio.Task[list[str]]) -> None:
    hand.fail(0)
    hand.fail(1)
    await settle()
    assert task.done() and isinstance(task.exception(), QuorumFailed)


async def _cancelled(hand: HandCalls, task: asyncio.Task[list[str]]) -> None:
    task.cancel()
    await settle()
    assert task.cancelled()


@pytest.mark.parametrize("scenario", [_won_early, _lost_early, _cancelled], ids=["won", "lost", "cancelled"])
async def test_abandoned_calls_that_fail_later_log_nothing(
    scenario: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    hand = HandCalls(3)
    task = spawn(parallel(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    await scenario(hand, task)
    for index, future in enumerate(hand.futures):
        assert future is not None
        if not future.done():
            future.set_exception(ReplicaTimeout(f"replica {index} answered too late"))
    await settle()
    del task, future
    hand.futures.clear()
    gc.collect()
    await settle()
    gc.collect()
    assert never_retrieved(caplog) == []


# --- speculative reads -----------------------------------------------------------------------------


async def test_speculative_asks_only_ack_replicas_while_they_answer_in_time() -> None:
    hand = HandCalls(3)
    task = spawn(speculative(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    assert hand.started == [0, 1]
    hand.succeed(0)
    hand.succeed(1)
    assert await task == ["answer-0", "answer-1"]
    assert hand.started == [0, 1]  # the third was never asked


async def test_speculative_asks_the_next_replica_when_one_is_late() -> None:
    hand = HandCalls(3, patience=0.0)  # every call is late as soon as the loop turns
    task = spawn(speculative(hand.calls, Quorum(ack=1, replicas=3)))
    await settle()
    assert hand.started == [0, 1, 2]  # the first was late, then the second: each brought in one more
    hand.succeed(2)
    assert await task == ["answer-2"]


async def test_speculative_asks_the_next_replica_when_one_fails() -> None:
    hand = HandCalls(3)
    task = spawn(speculative(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.fail(1)
    await settle()
    assert hand.started == [0, 1, 2]
    hand.succeed(0)
    hand.succeed(2)
    assert await task == ["answer-0", "answer-2"]


async def test_speculative_fails_once_ack_is_out_of_reach() -> None:
    hand = HandCalls(3)
    task = spawn(speculative(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    hand.fail(0)
    await settle()
    hand.fail(1)
    await settle()
    assert task.done()
    with pytest.raises(QuorumFailed, match="0 of 3 replicas answered, 2 needed"):
        task.result()
    hand.succeed(2)


async def test_speculative_writes_go_to_every_replica_at_once() -> None:
    hand = HandCalls(3)
    task = spawn(FANOUTS["speculative"].write(hand.calls, Quorum(ack=2, replicas=3)))
    await settle()
    assert hand.started == [0, 1, 2]
    for index in range(3):
        hand.succeed(index)
    await task
