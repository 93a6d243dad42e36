"""kvnode.coordinator.fanout's strategies (parallel, sequential, speculative) and modes, driven with a
round whose calls' outcomes the test tells by hand, as a replica's reply (or a local replica's answer)
tells them."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable

import pytest

from kvnode.coordinator.fanout import FANOUTS, QuorumFailed, Strategy, parallel, sequential, speculative
from kvnode.coordinator.quorum import NO_GROUP, Quorum
from kvnode.replica import Answered
from kvnode.replica.errors import ReplicaError, ReplicaTimeout, ReplicaUnavailable

NEVER_RETRIEVED = "exception was never retrieved"


class PatientReplica:
    """A replica as a fan-out sees it: its index among the calls, and its patience, which the test sets."""

    def __init__(self, index: int, patience: float) -> None:
        self.index = index
        self.patience = patience

    def speculative_delay(self) -> float:
        return self.patience


Outcome = tuple[int, str | None, str | None]  # a call's index, and its error's text or its answer


class HandCalls:
    """A fan-out's round (kvnode.coordinator.fanout.Round) whose calls' outcomes the test tells itself;
    records which calls were started, and what ``ended`` was told (``endings``, in order).
    ``patience``: every call's, or each one's; ``at_once``: the calls that answer before their start
    returns, as a local replica does; ``bug``: ``ended`` raises once it has recorded the outcome;
    ``groups``: each call's group in the quorum (a datacenter the quorum counts apart)."""

    def __init__(
        self,
        count: int,
        patience: float | tuple[float, ...] = 3600.0,
        at_once: tuple[int, ...] = (),
        groups: tuple[int, ...] = (),
    ) -> None:
        self.answered: list[Answered[str] | None] = [None] * count
        self.patience = patience if isinstance(patience, tuple) else (patience,) * count
        self.at_once = at_once
        self.groups = groups or (NO_GROUP,) * count  # each call's replica's group in the quorum
        self.endings: list[Outcome] = []
        self.bug = False

    def spawn(self, strategy: Strategy, quorum: Quorum) -> asyncio.Task[list[str]]:
        """``strategy`` asking this round's replicas for ``quorum``, as a task."""
        replicas = [PatientReplica(i, self.patience[i]) for i in range(len(self.answered))]
        return spawn(strategy(self, replicas, quorum, self.groups))

    @property
    def started(self) -> list[int]:
        return [index for index, answered in enumerate(self.answered) if answered is not None]

    def succeed(self, index: int) -> None:
        self._tell(index)(None, f"answer-{index}")

    def fail(self, index: int, error: ReplicaError | None = None) -> None:
        self._tell(index)(error or ReplicaUnavailable(f"replica {index} is down"), "")

    def _tell(self, index: int) -> Answered[str]:
        answered = self.answered[index]
        assert answered is not None, f"call {index} was not started"
        return answered

    def start(self, replica: PatientReplica, answered: Answered[str]) -> None:
        assert self.answered[replica.index] is None, f"call {replica.index} started twice"
        self.answered[replica.index] = answered
        if replica.index in self.at_once:
            self.succeed(replica.index)

    def ended(self, replica: PatientReplica, error: ReplicaError | None, answer: str) -> None:
        self.endings.append(
            (replica.index, None, answer) if error is None else (replica.index, str(error), None)
        )
        if self.bug:
            raise BuggyEnded(f"a bug after call {replica.index}")


class BuggyEnded(Exception):
    pass


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
    task = hand.spawn(parallel, Quorum(ack=2, copies=3))
    await settle()
    assert hand.started == [0, 1, 2]
    assert not task.done()
    for index in range(3):
        hand.succeed(index)
    assert len(await task) == 2


async def test_parallel_returns_on_the_ack_th_success_without_waiting_for_the_rest() -> None:
    hand = HandCalls(3)
    task = hand.spawn(parallel, Quorum(ack=2, copies=3))
    await settle()
    hand.succeed(2)
    await settle()
    assert not task.done()
    hand.succeed(0)
    await settle()
    assert task.done()
    assert task.result() == ["answer-2", "answer-0"]  # in the order they finished
    assert hand.endings == [(2, None, "answer-2"), (0, None, "answer-0")]
    hand.succeed(1)  # late: its outcome still reaches ``ended`` (hints, read repair), not the verdict
    assert hand.endings[-1] == (1, None, "answer-1")


async def test_parallel_counts_failures_and_still_reaches_ack() -> None:
    hand = HandCalls(3)
    task = hand.spawn(parallel, Quorum(ack=2, copies=3))
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
    task = hand.spawn(parallel, Quorum(ack=2, copies=3))
    await settle()
    hand.fail(1, ReplicaTimeout("replica 1 did not answer"))
    await settle()
    assert not task.done()  # 3 - 1 failures = 2 >= ack: still reachable
    hand.fail(0)
    await settle()
    assert task.done()  # 3 - 2 failures = 1 < ack, though call 2 is still running
    with pytest.raises(QuorumFailed) as raised:
        task.result()
    message = str(raised.value)
    assert "0 of 3 replicas answered, 2 needed" in message
    assert "replica 1 did not answer" in message and "replica 0 is down" in message
    hand.succeed(2)
    assert [index for index, _, _ in hand.endings] == [1, 0, 2]


async def test_parallel_with_ack_equal_from_fails_on_the_first_failure() -> None:
    hand = HandCalls(3)
    task = hand.spawn(parallel, Quorum(ack=3, copies=3))
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
    """A local replica answers before its start returns."""
    hand = HandCalls(3, at_once=(0,))
    task = hand.spawn(parallel, Quorum(ack=2, copies=3))
    await settle()
    assert hand.started == [0, 1, 2] and not task.done()
    hand.succeed(2)
    assert await task == ["answer-0", "answer-2"]
    hand.succeed(1)


async def test_parallel_tells_ended_each_outcome_as_it_is_told_without_a_turn_of_the_loop() -> None:
    """No Future or scheduled callback per call: an outcome reaches ``ended`` (and the verdict) within
    the reply's own decoding, before anything else runs."""
    hand = HandCalls(2)
    task = hand.spawn(parallel, Quorum(ack=1, copies=2))
    await settle()
    hand.fail(1)
    assert hand.endings == [(1, "replica 1 is down", None)]
    hand.succeed(0)
    assert hand.endings[-1] == (0, None, "answer-0")
    assert await task == ["answer-0"]


async def test_sequential_starts_each_call_after_the_previous_finished_and_stops_at_ack() -> None:
    hand = HandCalls(3)
    task = hand.spawn(sequential, Quorum(ack=2, copies=3))
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
    task = hand.spawn(sequential, Quorum(ack=2, copies=3))
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
    task = hand.spawn(sequential, Quorum(ack=2, copies=3))
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
    task = hand.spawn(sequential, Quorum(ack=1, copies=2))
    await settle()
    hand.fail(0)
    await settle()
    hand.fail(1)
    with pytest.raises(QuorumFailed) as raised:
        await task
    assert "replica 0 is down" in str(raised.value) and "replica 1 is down" in str(raised.value)


@pytest.mark.parametrize("strategy", [parallel, sequential, speculative])
async def test_a_bug_in_ended_is_logged_and_the_verdict_still_counts_the_call(
    strategy: Strategy, caplog: pytest.LogCaptureFixture
) -> None:
    hand = HandCalls(2)
    hand.bug = True  # around the verdict: hints, read repair
    task = hand.spawn(strategy, Quorum(ack=2, copies=2))
    await settle()
    hand.succeed(0)
    await settle()
    hand.succeed(1)
    assert await task == ["answer-0", "answer-1"]
    assert [record.exc_info[0] for record in caplog.records if record.exc_info] == [BuggyEnded, BuggyEnded]


async def test_sequential_tells_ended_every_outcome_even_after_the_request_was_cancelled() -> None:
    """A read round closes only once every call it started has ended."""
    hand = HandCalls(3)
    task = hand.spawn(sequential, Quorum(ack=2, copies=3))
    await settle()
    hand.fail(0)
    await settle()
    task.cancel()
    await settle()
    assert task.cancelled() and hand.started == [0, 1]
    hand.succeed(1)
    assert hand.endings == [(0, "replica 0 is down", None), (1, None, "answer-1")]


async def test_sync_writes_ask_every_replica_in_turn_even_after_ack() -> None:
    hand = HandCalls(3)
    task = hand.spawn(FANOUTS["sync"].write, Quorum(ack=2, copies=3))
    for index in range(3):
        await settle()
        assert hand.started == list(range(index + 1))  # one at a time
        assert not task.done()
        hand.succeed(index)
    assert await task == ["answer-0", "answer-1", "answer-2"]


async def test_sync_writes_answer_after_asking_all_when_ack_is_reached_despite_a_failure() -> None:
    hand = HandCalls(3)
    task = hand.spawn(FANOUTS["sync"].write, Quorum(ack=2, copies=3))
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
        task = hand.spawn(fanout.write, Quorum(ack=1, copies=3))
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
    task = hand.spawn(parallel, Quorum(ack=2, copies=3))
    await settle()
    await scenario(hand, task)
    told = {index for index, _, _ in hand.endings}
    for index in hand.started:
        if index not in told:
            hand.fail(index, ReplicaTimeout(f"replica {index} answered too late"))
    assert len(hand.endings) == 3
    await settle()
    del task
    hand.answered.clear()
    gc.collect()
    await settle()
    gc.collect()
    assert never_retrieved(caplog) == []


# --- speculative reads -----------------------------------------------------------------------------


async def test_speculative_asks_only_ack_replicas_while_they_answer_in_time() -> None:
    hand = HandCalls(3)
    task = hand.spawn(speculative, Quorum(ack=2, copies=3))
    await settle()
    assert hand.started == [0, 1]
    hand.succeed(0)
    hand.succeed(1)
    assert await task == ["answer-0", "answer-1"]
    assert hand.started == [0, 1]  # the third was never asked


async def test_speculative_asks_the_next_replica_when_one_is_late() -> None:
    hand = HandCalls(3, patience=0.0)  # every call is late as soon as the loop turns
    task = hand.spawn(speculative, Quorum(ack=1, copies=3))
    await settle()
    assert hand.started == [0, 1, 2]  # the first was late, then the second: each brought in one more
    hand.succeed(2)
    assert await task == ["answer-2"]


async def test_speculative_asks_the_next_replica_when_one_fails() -> None:
    hand = HandCalls(3)
    task = hand.spawn(speculative, Quorum(ack=2, copies=3))
    await settle()
    hand.fail(1)
    await settle()
    assert hand.started == [0, 1, 2]
    hand.succeed(0)
    hand.succeed(2)
    assert await task == ["answer-0", "answer-2"]


async def test_speculative_fails_once_ack_is_out_of_reach() -> None:
    hand = HandCalls(3)
    task = hand.spawn(speculative, Quorum(ack=2, copies=3))
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
    task = hand.spawn(FANOUTS["speculative"].write, Quorum(ack=2, copies=3))
    await settle()
    assert hand.started == [0, 1, 2]
    for index in range(3):
        hand.succeed(index)
    await task


async def test_speculative_counts_a_local_answer_at_once_and_brings_in_no_one_for_it() -> None:
    hand = HandCalls(3, at_once=(0,))
    task = hand.spawn(speculative, Quorum(ack=2, copies=3))
    await settle()
    assert hand.started == [0, 1]
    hand.succeed(1)
    assert await task == ["answer-0", "answer-1"]
    assert hand.started == [0, 1]


async def test_speculative_a_late_call_that_then_fails_brings_in_no_second_replica() -> None:
    hand = HandCalls(4, patience=(0.0, 3600.0, 3600.0, 3600.0))
    task = hand.spawn(speculative, Quorum(ack=1, copies=4))
    await settle()
    assert hand.started == [0, 1]  # call 0 was late: it brought in call 1
    hand.fail(0)
    await settle()
    assert hand.started == [0, 1]  # it already brought one in
    hand.fail(1)
    await settle()
    assert hand.started == [0, 1, 2]
    hand.succeed(2)
    assert await task == ["answer-2"]


async def test_speculative_a_late_answer_after_the_verdict_still_reaches_ended() -> None:
    hand = HandCalls(3, patience=(0.0, 3600.0, 3600.0))
    task = hand.spawn(speculative, Quorum(ack=1, copies=3))
    await settle()
    hand.succeed(1)
    assert await task == ["answer-1"]
    hand.succeed(0)  # for read repair
    assert hand.endings == [(1, None, "answer-1"), (0, None, "answer-0")]
    assert hand.started == [0, 1]


# --- quorums that count datacenters apart ------------------------------------------------------------------

EACH_QUORUM = Quorum.parse("each_quorum", None, (("east", 3), ("west", 3)))
EAST_WEST = (0, 0, 0, 1, 1, 1)  # calls 0-2 to the east's owners, 3-5 to the west's


@pytest.mark.parametrize("fanout", list(FANOUTS))
async def test_each_quorum_answers_once_every_datacenter_has_its_majority(fanout: str) -> None:
    """In every mode (a speculative read asks every owner at once: the next one in line may not be in the
    datacenter that needs one; a sync read stops once the rule is met)."""
    hand = HandCalls(6, groups=EAST_WEST)
    task = hand.spawn(FANOUTS[fanout].read, EACH_QUORUM)
    for index in range(6):
        await settle()
        if index in hand.started:
            hand.succeed(index)
        if index < 4:
            assert not task.done(), index  # three from the east and one from the west: not yet
    assert await task == [f"answer-{index}" for index in range(5)]
    assert hand.started == list(range(5 if fanout == "sync" else 6))


async def test_each_quorum_fails_once_a_datacenter_cannot_make_its_majority() -> None:
    hand = HandCalls(6, groups=EAST_WEST)
    task = hand.spawn(parallel, EACH_QUORUM)
    await settle()
    for index in (0, 1, 2):
        hand.succeed(index)
    hand.fail(3)
    assert not task.done()
    hand.fail(4)
    with pytest.raises(QuorumFailed, match=r"3 of 6 replicas answered, 4 needed \(west: 0 of 3 answered"):
        await task
    hand.succeed(5)  # a late answer after the verdict is only dropped


async def test_a_local_quorum_write_answers_on_the_local_majority_whatever_the_remote_owners_do() -> None:
    quorum = Quorum.parse("local_quorum", None, (("east", 3), ("west", 3)))
    hand = HandCalls(6, groups=(0, 0, 0, NO_GROUP, NO_GROUP, NO_GROUP))
    task = hand.spawn(parallel, quorum)
    await settle()
    for index in (3, 4, 5):
        hand.fail(index, ReplicaTimeout(f"replica {index} timed out"))
    hand.succeed(0)
    assert not task.done()
    hand.succeed(1)
    assert await task == ["answer-0", "answer-1"]
