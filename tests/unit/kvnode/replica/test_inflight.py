"""The calls to one peer in flight (kvnode.replica.inflight), in-process on a real event loop: ids and
answers told to each call's callback, the deadline sweep, the bounds on calls and bytes, and failing them
all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvnode.metrics import CallMeter
from kvnode.replica import Answered, answer_future
from kvnode.replica.channel import wire
from kvnode.replica.errors import ReplicaError, ReplicaOverloaded, ReplicaTimeout, ReplicaUnavailable
from kvnode.replica.inflight import CallsInFlight, carry_s
from tests.harness import eventually

URL = "http://peer:1"


def calls_in_flight(
    timeout: float = 60.0, max_calls: int = 100, max_bytes: int = 10_000, large: int = 1 << 20
) -> tuple[CallsInFlight, CallMeter, list[int]]:
    """Calls of more than ``large`` bytes get 1 s more per 100 bytes beyond it (the node's: per 4 MiB)."""
    meter, timed_out = CallMeter(), list[int]()
    calls = CallsInFlight(
        URL,
        timeout,
        max_calls=max_calls,
        max_bytes=max_bytes,
        meter=meter,
        on_timeout=timed_out.append,
        large=large,
        carry_rate=100,
    )
    return calls, meter, timed_out


class Told:
    """The outcomes told to the calls' callbacks, in order: (the call's name, its error, its answer)."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, ReplicaError | None, object]] = []

    def to(self, name: str) -> Answered[object]:
        def answered(error: ReplicaError | None, answer: object) -> None:
            self.outcomes.append((name, error, answer))

        return answered


async def test_an_answered_call_is_told_its_answer_at_once_and_is_counted() -> None:
    calls, meter, _ = calls_in_flight()
    told = Told()
    call_id = calls.start(wire.Op.READ, "read", 40, told.to("one"))
    assert call_id is not None
    assert (len(calls), calls.bytes) == (1, 40)
    call = calls.take(call_id)
    assert call is not None and call.op is wire.Op.READ and call.size == 40
    assert (len(calls), calls.bytes) == (0, 0)
    calls.settle(call, None, "answer")
    assert told.outcomes == [("one", None, "answer")]  # no Future: told before settle returns
    assert meter.calls == {("read", "ok"): 1}
    assert calls.take(call_id) is None  # a second reply for it is ignored


async def test_ids_are_distinct_and_wrap_at_32_bits() -> None:
    calls, _, _ = calls_in_flight()
    told = Told()
    ids = {calls.start(wire.Op.READ, "read", 1, told.to("any")) for _ in range(5)}
    assert len(ids) == 5 and None not in ids
    calls._next_id = 0xFFFFFFFF
    assert calls.start(wire.Op.READ, "read", 1, told.to("any")) == 0


async def test_calls_past_their_deadline_fail_with_a_timeout_in_call_order() -> None:
    calls, meter, timed_out = calls_in_flight(timeout=0.05)
    told = Told()
    first, second, answered = (
        calls.start(wire.Op.WRITE, "write", 10, told.to(name)) for name in ("first", "second", "answered")
    )
    assert first is not None and second is not None and answered is not None
    answer = calls.take(answered)
    assert answer is not None
    calls.settle(answer, None, None)
    await eventually(lambda: len(timed_out) >= 2, 10, "the sweep")
    assert timed_out == [first, second]
    assert [name for name, _, _ in told.outcomes] == ["answered", "first", "second"]
    for _, error, _ in told.outcomes[1:]:
        assert isinstance(error, ReplicaTimeout) and str(error) == f"{URL} did not answer within 0.05s"
    assert meter.calls == {("write", "timeout"): 2, ("write", "ok"): 1}
    assert (len(calls), calls.bytes) == (0, 0)


async def test_a_call_its_timed_out_callback_makes_is_swept_by_one_timer() -> None:
    """A callback told a timeout may call the peer again at once (a speculative read, a hint): the new
    call gets its own deadline, and the sweep goes on with one timer."""
    calls, meter, timed_out = calls_in_flight(timeout=0.05)
    told = Told()
    again = told.to("again")

    def retry(error: ReplicaError | None, answer: object) -> None:
        calls.start(wire.Op.READ, "read", 1, again)

    calls.start(wire.Op.READ, "read", 1, retry)
    await eventually(lambda: len(timed_out) >= 2, 10, "the sweep of both calls")
    assert [name for name, _, _ in told.outcomes] == ["again"]
    assert meter.calls == {("read", "timeout"): 2}
    assert len(calls) == 0


async def test_a_call_beyond_either_bound_is_refused_but_a_lone_call_is_always_taken() -> None:
    calls, meter, _ = calls_in_flight(max_calls=2, max_bytes=100)
    told = Told()
    answered = told.to("any")
    assert calls.start(wire.Op.WRITE, "write", 500, answered) is not None
    assert calls.start(wire.Op.READ, "read", 1, answered) is None
    fresh, _, _ = calls_in_flight(max_calls=2, max_bytes=100)
    for _ in range(2):
        assert fresh.start(wire.Op.READ, "read", 10, answered) is not None
    assert fresh.start(wire.Op.READ, "read", 10, answered) is None
    error = fresh.overloaded()
    assert isinstance(error, ReplicaOverloaded) and "2 calls, 20 bytes already in flight" in str(error)
    calls.refuse("hint", error, told.to("refused"))
    assert told.outcomes == [("refused", error, None)]
    assert meter.calls == {("hint", "overloaded"): 1}


async def test_fail_all_fails_every_call_and_stops_the_sweep() -> None:
    calls, meter, timed_out = calls_in_flight(timeout=0.05)
    told = Told()
    for name in ("a", "b", "c"):
        calls.start(wire.Op.READ, "read", 5, told.to(name))
    calls.fail_all(ReplicaUnavailable("gone"))
    calls.fail_all(ReplicaUnavailable("gone again"))  # nothing left
    assert [(name, str(error)) for name, error, _ in told.outcomes] == [
        ("a", "gone"),
        ("b", "gone"),
        ("c", "gone"),
    ]
    await asyncio.sleep(0.1)
    assert timed_out == []
    assert meter.calls == {("read", "unavailable"): 3}


@pytest.mark.parametrize("cancel", [False, True], ids=["awaited", "cancelled"])
async def test_a_call_awaited_through_answer_future_resolves_or_is_dropped_once_cancelled(
    cancel: bool,
) -> None:
    calls, meter, _ = calls_in_flight()
    started: list[int | None] = []
    future: asyncio.Future[object] = answer_future(
        asyncio.get_running_loop(),
        lambda answered: started.append(calls.start(wire.Op.READ, "read", 5, answered)),
    )
    if cancel:
        future.cancel()
    call = calls.take(started[0] or 0)
    assert call is not None
    calls.settle(call, None, "answer")
    assert future.cancelled() if cancel else future.result() == "answer"
    assert meter.calls == {("read", "ok"): 1}  # the peer answered either way


async def test_a_large_call_gets_time_for_its_bytes_and_a_small_one_after_it_keeps_its_deadline() -> None:
    """Issue 41: a 16 MiB write could not be carried within the default second. A call of 16 MiB gets
    3.75 s more (the node's rule); a small call made after it still fails at its own deadline."""
    meter, timed_out = CallMeter(), list[int]()
    calls = CallsInFlight(
        URL, 0.05, max_calls=100, max_bytes=1 << 30, meter=meter, on_timeout=timed_out.append
    )
    told = Told()
    loop = asyncio.get_running_loop()
    began = loop.time()
    calls.start(wire.Op.WRITE, "write", 16 * 1024 * 1024, told.to("large"))
    small = calls.start(wire.Op.WRITE, "write", 100, told.to("small"))
    await eventually(lambda: len(timed_out) >= 1, 10, "the small call's deadline")
    assert timed_out == [small] and loop.time() - began < 3.75  # not held until the large one's
    assert [(name, str(error)) for name, error, _ in told.outcomes] == [
        ("small", f"{URL} did not answer within 0.05s")
    ]
    assert len(calls) == 1  # the large one is still in flight
    calls.fail_all(ReplicaUnavailable("gone"))


async def test_a_large_call_not_answered_in_its_time_fails_saying_how_long_it_was_given() -> None:
    calls, _, timed_out = calls_in_flight(timeout=0.05, large=100)
    told = Told()
    large = calls.start(wire.Op.WRITE, "write", 110, told.to("large"))  # 10 bytes beyond: 0.1 s more
    await eventually(lambda: len(timed_out) >= 1, 10, "the large call's deadline")
    assert timed_out == [large]
    assert [(name, str(error)) for name, error, _ in told.outcomes] == [
        ("large", f"{URL} did not answer within 0.15s")
    ]


def test_only_the_bytes_beyond_a_mib_give_a_call_more_time_a_second_per_4_mib() -> None:
    mib = 1024 * 1024
    assert [carry_s(size) for size in (0, 64 * 1024, mib)] == [0.0, 0.0, 0.0]
    assert carry_s(mib + 4 * mib) == 1.0
    assert carry_s(16 * mib + 64) > 3.75  # the largest body and its header: 4.75 s with the default timeout


class LaggingLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock a test moves on (``lag``: the loop fell behind), and whose ``call_at``
    answers a time already past with a plain Handle, which has no ``when()``, as uvloop's does."""

    lag = 0.0

    def time(self) -> float:
        return super().time() + self.lag

    def call_at(  # type: ignore[override]  # typeshed's generic signature, narrowed for the test
        self, when: float, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        if when <= self.time():
            return self.call_soon(callback, *args, context=context)  # type: ignore[return-value]
        return super().call_at(when, callback, *args, context=context)


def test_a_sweep_rearmed_after_its_time_leaves_the_next_call_unharmed() -> None:
    """A timed-out call's callback takes the loop a second past the next call's deadline: the sweep
    re-armed for it is due at once (on uvloop a Handle without ``when()``), and a call made before it runs
    is taken into flight, and times out in its turn (it was a 500 of the node's, under load)."""

    async def scenario(loop: LaggingLoop) -> Told:
        calls, _, _ = calls_in_flight(timeout=0.05)
        told = Told()
        made: list[int | None] = []

        def lagging(error: ReplicaError | None, answer: object) -> None:
            loop.lag += 1.0
            loop.call_soon(lambda: made.append(calls.start(wire.Op.READ, "read", 10, told.to("after"))))

        calls.start(wire.Op.READ, "read", 10, lagging)
        loop.lag += 0.5  # the next call's deadline half a second after the first's
        calls.start(wire.Op.READ, "read", 10, told.to("next"))
        await eventually(lambda: len(told.outcomes) == 2, what="both later calls timed out")
        assert made and made[0] is not None
        return told

    with asyncio.Runner(loop_factory=LaggingLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, LaggingLoop)
        told = runner.run(scenario(loop))
    assert [(name, type(error)) for name, error, _ in told.outcomes] == [
        ("next", ReplicaTimeout),
        ("after", ReplicaTimeout),
    ]
