"""The calls to one peer in flight (kvnode.replica.inflight), in-process on a real event loop: ids and
answers, the deadline sweep, the bounds on calls and bytes, and failing them all."""

from __future__ import annotations

import asyncio

import pytest

from kvnode.metrics import CallMeter
from kvnode.replica import wire
from kvnode.replica.errors import ReplicaOverloaded, ReplicaTimeout, ReplicaUnavailable
from kvnode.replica.inflight import CallsInFlight
from tests.harness import eventually

URL = "http://peer:1"


def calls_in_flight(
    timeout: float = 60.0, max_calls: int = 100, max_bytes: int = 10_000
) -> tuple[CallsInFlight, CallMeter, list[int]]:
    meter, timed_out = CallMeter(), list[int]()
    calls = CallsInFlight(
        URL, timeout, max_calls=max_calls, max_bytes=max_bytes, meter=meter, on_timeout=timed_out.append
    )
    return calls, meter, timed_out


async def test_an_answered_call_resolves_its_future_and_is_counted() -> None:
    calls, meter, _ = calls_in_flight()
    started = calls.start(wire.Op.READ, "read", 40)
    assert started is not None
    call_id, future = started
    assert (len(calls), calls.bytes) == (1, 40)
    call = calls.take(call_id)
    assert call is not None and call.op is wire.Op.READ and call.size == 40
    assert (len(calls), calls.bytes) == (0, 0)
    calls.settle(call, None, "answer")
    assert await future == "answer"
    assert meter.calls == {("read", "ok"): 1}
    assert calls.take(call_id) is None  # a second reply for it is ignored


async def test_ids_are_distinct_and_wrap_at_32_bits() -> None:
    calls, _, _ = calls_in_flight()
    ids = set()
    for _ in range(5):
        started = calls.start(wire.Op.READ, "read", 1)
        assert started is not None
        ids.add(started[0])
    assert len(ids) == 5
    calls._next_id = 0xFFFFFFFF
    started = calls.start(wire.Op.READ, "read", 1)
    assert started is not None and started[0] == 0


async def test_calls_past_their_deadline_fail_with_a_timeout_in_call_order() -> None:
    calls, meter, timed_out = calls_in_flight(timeout=0.05)
    first, second, answered = (calls.start(wire.Op.WRITE, "write", 10) for _ in range(3))
    assert first and second and answered
    answer = calls.take(answered[0])
    assert answer is not None
    calls.settle(answer, None, None)
    await eventually(lambda: len(timed_out) >= 2, 10, "the sweep")
    assert timed_out == [first[0], second[0]]
    for _, future in (first, second):
        with pytest.raises(ReplicaTimeout, match=f"{URL} did not answer within 0.05s"):
            await future
    assert meter.calls == {("write", "timeout"): 2, ("write", "ok"): 1}
    assert (len(calls), calls.bytes) == (0, 0)


async def test_a_call_beyond_either_bound_is_refused_but_a_lone_call_is_always_taken() -> None:
    calls, meter, _ = calls_in_flight(max_calls=2, max_bytes=100)
    assert calls.start(wire.Op.WRITE, "write", 500) is not None  # alone: taken, however large
    assert calls.start(wire.Op.READ, "read", 1) is None  # over the bytes
    fresh, _, _ = calls_in_flight(max_calls=2, max_bytes=100)
    assert fresh.start(wire.Op.READ, "read", 10) and fresh.start(wire.Op.READ, "read", 10)
    assert fresh.start(wire.Op.READ, "read", 10) is None  # over the count
    error = fresh.overloaded()
    assert isinstance(error, ReplicaOverloaded) and "2 calls, 20 bytes already in flight" in str(error)
    refused = calls.refuse("hint", error)
    with pytest.raises(ReplicaOverloaded):
        await refused
    assert meter.calls == {("hint", "overloaded"): 1}


async def test_fail_all_fails_every_call_and_stops_the_sweep() -> None:
    calls, meter, timed_out = calls_in_flight(timeout=0.05)
    futures = [started[1] for started in (calls.start(wire.Op.READ, "read", 5) for _ in range(3)) if started]
    assert calls.fail_all(ReplicaUnavailable("gone"))
    assert not calls.fail_all(ReplicaUnavailable("gone"))  # nothing left
    for future in futures:
        with pytest.raises(ReplicaUnavailable, match="gone"):
            await future
    await asyncio.sleep(0.1)
    assert timed_out == []
    assert meter.calls == {("read", "unavailable"): 3}


async def test_a_cancelled_call_is_counted_as_cancelled() -> None:
    calls, meter, _ = calls_in_flight()
    started = calls.start(wire.Op.READ, "read", 5)
    assert started is not None
    started[1].cancel()
    call = calls.take(started[0])
    assert call is not None
    calls.settle(call, None, "late")
    assert meter.calls == {("read", "cancelled"): 1}
