"""Admission control in this process: a starved loop sheds a new entity request with a one-line 503 and
Retry-After while clients queue, counted by why, and admits again once calm; the in-flight limits are
tested on real nodes (tests/cluster/test_overload.py)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from kvnode.access.admission import STARVED_QUEUE, Admission
from kvnode.memory import Settler
from kvnode.metrics import Starvation


def test_a_starved_loop_sheds_new_requests_while_clients_queue_and_admits_again_once_calm() -> None:
    starvation = Starvation(enter_s=0.1, exit_s=0.02, window_s=1.0)
    admission = Admission(256, 1 << 26, 1 << 20, Settler(), starvation)
    request = make_mocked_request("GET", "/v0/entity?id=k")
    for tick in range(8):
        starvation.observe(0.2, now=float(tick) * 0.2)
    assert starvation.shedding
    # Behind with few requests in progress (a large body, a machine short of CPU): clients are not the cause.
    for _ in range(STARVED_QUEUE):
        assert admission.admit(request) == 0
    shed = admission.admit(request)
    assert isinstance(shed, web.Response) and shed.status == 503
    assert shed.headers["Retry-After"] == "1"
    assert shed.text is not None and shed.text.startswith("overloaded: event loop 200 ms behind")
    assert shed.text.count("\n") == 1
    assert (admission.shed_by, admission.inflight) == ({"starved": 1}, STARVED_QUEUE)
    for tick in range(8):
        starvation.observe(0.001, now=2.0 + tick * 0.2)
    assert admission.admit(request) == 0 and admission.inflight == STARVED_QUEUE + 1
