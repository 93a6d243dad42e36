"""Admission control (kvnode.access.admission): requests and body bytes in progress counted, a 503 with
Retry-After beyond either limit, and while the event loop is starved and clients queue (counted by why),
and the bytes of each answered body handed to the memory settler."""

from __future__ import annotations

import asyncio
from unittest import mock

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request

from kvnode.access.admission import STARVED_QUEUE, Admission
from kvnode.loop_lag import Starvation
from tests.drivers import PassedSizes

MAX_BODY = 1000


def put(length: int) -> web.Request:
    return make_mocked_request("PUT", "/v0/entity?id=k", headers={"Content-Length": str(length)})


def chunked_put() -> web.Request:
    """A PUT whose body is chunked: its size not known until it has arrived."""
    body = StreamReader(mock.Mock(), 2**16, loop=asyncio.get_running_loop())
    return make_mocked_request("PUT", "/v0/entity?id=k", {"Transfer-Encoding": "chunked"}, payload=body)


def get() -> web.Request:
    return make_mocked_request("GET", "/v0/entity?id=k")


def test_requests_beyond_the_limit_are_answered_503_and_counted_shed() -> None:
    admission = Admission(limit=2, max_bytes=10_000, max_body_bytes=MAX_BODY, settler=PassedSizes())
    assert admission.admit(get()) == 0
    assert admission.admit(put(300)) == 300
    assert (admission.inflight, admission.inflight_bytes) == (2, 300)
    refused = admission.admit(get())
    assert isinstance(refused, web.Response)
    assert refused.status == 503 and refused.headers["Retry-After"] == "1"
    assert refused.text == "overloaded: 2 requests in progress; retry\n"
    # A shed request is not counted in progress.
    assert (admission.inflight, admission.shed_by.total()) == (2, 1)


def test_leaving_frees_the_request_and_its_bytes_and_tells_the_settler() -> None:
    settler = PassedSizes()
    admission = Admission(limit=1, max_bytes=10_000, max_body_bytes=MAX_BODY, settler=settler)
    size = admission.admit(put(300))
    assert isinstance(size, int) and size == 300
    admission.leave(size)
    assert (admission.inflight, admission.inflight_bytes, settler.sizes) == (0, 0, [300])
    assert admission.admit(get()) == 0  # room again


def test_a_body_that_would_pass_the_byte_limit_is_shed_unless_it_is_alone() -> None:
    admission = Admission(limit=10, max_bytes=500, max_body_bytes=MAX_BODY, settler=PassedSizes())
    alone = admission.admit(put(900))  # above max_bytes, but nothing else is in progress
    assert isinstance(alone, int) and alone == 900
    refused = admission.admit(put(1))
    assert isinstance(refused, web.Response) and refused.status == 503
    assert refused.text == "overloaded: 900 bytes of request bodies in progress; retry\n"
    assert admission.admit(get()) == 0  # a request without a body passes the byte limit
    admission.leave(alone)
    assert admission.admit(put(400)) == 400


async def test_a_body_counts_as_at_most_the_largest_allowed_and_a_chunked_one_as_that() -> None:
    admission = Admission(limit=10, max_bytes=10_000, max_body_bytes=MAX_BODY, settler=PassedSizes())
    assert admission.admit(put(50_000)) == MAX_BODY  # refused later (413) without being read
    assert admission.admit(chunked_put()) == MAX_BODY
    assert admission.inflight_bytes == 2 * MAX_BODY


def test_a_starved_loop_sheds_new_requests_while_clients_queue_and_admits_again_once_calm() -> None:
    starvation = Starvation(enter_s=0.1, exit_s=0.02, window_s=1.0)
    admission = Admission(256, 1 << 26, MAX_BODY, PassedSizes(), starvation)
    for tick in range(8):
        starvation.observe(0.2, now=float(tick) * 0.2)
    assert starvation.shedding
    # Behind with few requests in progress (a large body, a machine short of CPU): clients are not the cause.
    for _ in range(STARVED_QUEUE):
        assert admission.admit(get()) == 0
    shed = admission.admit(get())
    assert isinstance(shed, web.Response) and shed.status == 503
    assert shed.headers["Retry-After"] == "1"
    assert shed.text == "overloaded: event loop 200 ms behind; retry\n"
    assert admission.inflight == STARVED_QUEUE
    assert dict(admission.shed_by) == {"requests": 0, "bytes": 0, "starved": 1}
    for tick in range(8):
        starvation.observe(0.001, now=2.0 + tick * 0.2)
    assert admission.admit(get()) == 0 and admission.inflight == STARVED_QUEUE + 1
