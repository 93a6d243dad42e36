"""profiling.counts in this process: the closed loop sends exactly the requests asked, each connection
one at a time, on connections opened once; a server that stops answering fails the load instead of
hanging it; perf's refusal is one line. (The command end to end: tests/process/profiling/test_main.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from loadtest.workload import Workload
from profiling import counts
from profiling.counts import ClosedLoop, perf_refusal
from profiling.load import LoadError


class Entity:
    """A /v0/entity that counts the requests and connections it sees, and the most answered at once."""

    def __init__(self) -> None:
        self.requests = 0
        self.peers: set[object] = set()
        self.at_once = 0
        self.most_at_once = 0
        self.hold: asyncio.Event | None = None  # set: answer; None: answer at once

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.peers.add(request.transport)
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            await asyncio.sleep(0)  # let the others' requests in
            if self.hold is not None:
                await self.hold.wait()
            return web.Response(status=201 if request.method == "PUT" else 404, text="x")
        finally:
            self.at_once -= 1


@pytest.fixture
async def entity() -> AsyncIterator[tuple[Entity, str]]:
    served = Entity()
    app = web.Application()
    app.router.add_route("*", "/v0/entity", served.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield served, f"http://{host}:{port}"
    await runner.cleanup()


async def test_the_loop_sends_exactly_the_requests_asked_on_connections_opened_once(
    entity: tuple[Entity, str],
) -> None:
    served, url = entity
    load = ClosedLoop(url, Workload("put", keys=10, value_size=8), connections=4)
    await load.open()
    assert await load.run(10) == {"201": 10}
    assert await load.run(3) == {"201": 3}  # fewer than the connections: the others wait
    load.close()
    assert served.requests == 13 and len(served.peers) == 4 and served.most_at_once == 4


async def test_a_server_that_stops_answering_fails_the_load(
    entity: tuple[Entity, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served, url = entity
    served.hold = asyncio.Event()  # never set
    monkeypatch.setattr(counts, "_REQUEST_TIMEOUT_S", 0.05)
    load = ClosedLoop(url, Workload("get", keys=10), connections=2)
    await load.open()
    with pytest.raises(LoadError, match=r"no answer for 0\.05 s"):
        await load.run(5)
    load.close()
    served.hold.set()  # the held handlers end, and the server stops at once


def test_without_perf_the_refusal_says_how_to_install_it() -> None:
    assert perf_refusal(None) == "perf is not installed (apt-get install linux-perf)"
