"""profiling.closed_loop in this process: the loop sends exactly the requests asked, on connections opened
once; a server that stops answering fails the load instead of hanging it. (It serves ``python -m
profiling counts``, run end to end in tests/process/profiling/test_main.py.)"""

from __future__ import annotations

import asyncio

import pytest

from loadtest.workload import Workload
from profiling import closed_loop
from profiling.closed_loop import ClosedLoop
from profiling.load import LoadError
from tests.entity_stub import serving_stub


async def test_the_loop_sends_exactly_the_requests_asked_on_connections_opened_once() -> None:
    async with serving_stub() as (stub, url):
        load = ClosedLoop(url, Workload("put", keys=10, value_size=8), connections=4)
        await load.open()
        opened = list(load._pool)
        assert await load.run(10) == {"201": 10}
        assert await load.run(3) == {"201": 3}  # fewer than the connections: the others wait
        assert load._pool == opened and all(connection.connected for connection in opened)
        load.close()
    assert len(stub.keys) == 13


async def test_a_server_that_stops_answering_fails_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    silent = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)  # reads nothing
    port = silent.sockets[0].getsockname()[1]
    monkeypatch.setattr(closed_loop, "REQUEST_TIMEOUT_S", 0.05)
    load = ClosedLoop(f"http://127.0.0.1:{port}", Workload("get", keys=10), connections=2)
    await load.open()
    with pytest.raises(LoadError, match=r"no answer for 0\.05 s"):
        await load.run(5)
    load.close()
    silent.close()
