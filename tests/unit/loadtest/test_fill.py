"""loadtest.fill against an in-process stub node whose PUTs fail on demand: every key is written once,
failed PUTs are sent again in later passes, and keys that never take are reported."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from loadtest.fill import fill
from loadtest.workload import Workload, key_name
from tests.loopback import served


class FlakyNode:
    """Answers PUT with 201, except a key's first ``failures[key]`` PUTs, which get a 504."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.puts: Counter[str] = Counter()

    async def put(self, request: web.Request) -> web.Response:
        key = request.query["id"]
        await request.read()
        self.puts[key] += 1
        if self.puts[key] <= self.failures.get(key, 0):
            return web.Response(status=504)
        return web.Response(status=201)


@pytest.fixture
async def flaky() -> AsyncIterator[tuple[FlakyNode, str]]:
    node = FlakyNode()
    app = web.Application()
    app.router.add_put("/v0/entity", node.put)
    async with served(app) as url:
        yield node, url


async def test_every_key_is_written_once(flaky: tuple[FlakyNode, str]) -> None:
    node, url = flaky
    written, failures = await fill([url], Workload("put", keys=300, value_size=10), concurrency=8)
    assert (written, failures) == (300, Counter())
    assert node.puts == Counter({key_name(index): 1 for index in range(300)})


async def test_failed_puts_are_sent_again_in_later_passes(flaky: tuple[FlakyNode, str]) -> None:
    node, url = flaky
    node.failures = {key_name(3): 1, key_name(7): 2}
    passes: list[str] = []
    written, failures = await fill([url], Workload("put", keys=20), concurrency=4, say=passes.append)
    assert (written, failures) == (20, Counter())
    assert node.puts[key_name(3)] == 2 and node.puts[key_name(7)] == 3 and node.puts[key_name(0)] == 1
    assert len(passes) == 2 and "2 PUTs failed (e.g. 504)" in passes[0], passes


async def test_keys_that_never_take_are_reported_after_the_last_pass(flaky: tuple[FlakyNode, str]) -> None:
    node, url = flaky
    node.failures = {key_name(5): 99}
    written, failures = await fill([url], Workload("put", keys=10), concurrency=2, passes=2)
    assert (written, failures) == (9, Counter({"504": 1}))
    assert node.puts[key_name(5)] == 2


async def test_a_cluster_that_refuses_everything_is_not_asked_again(flaky: tuple[FlakyNode, str]) -> None:
    node, url = flaky
    node.failures = {key_name(index): 99 for index in range(5)}
    written, failures = await fill([url], Workload("put", keys=5), concurrency=2)
    assert (written, failures) == (0, Counter({"504": 5}))
    assert set(node.puts.values()) == {1}
