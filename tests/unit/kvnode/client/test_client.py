"""kvnode.client against real node processes: every call and error, token-aware routing (seen in each
node's /metrics), a killed or frozen member routed around, and a 503's Retry-After honoured."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from kvnode.client import (
    Client,
    ServerError,
    Unreachable,
)


@contextlib.asynccontextmanager
async def stub_node(view: bool) -> AsyncIterator[str]:
    """What a real node cannot be made to answer at will: a 500 storage error on every entity request,
    behind a one-member cluster view (or, ``view=False``, a page that is not one)."""

    async def cluster_view(request: web.Request) -> web.Response:
        if not view:
            return web.Response(text="<html>not kvnode</html>")
        url = f"http://{request.host}"
        member = {"url": url, "self": True, "state": "self", "reachable": True, "down_for_s": 0.0}
        return web.json_response({"node": url, "cluster": [url], "members": [member]})

    async def storage_error(request: web.Request) -> web.Response:
        return web.Response(status=500, text="storage error: disk on fire\n")

    app = web.Application()
    app.router.add_get("/v0/cluster", cluster_view)
    app.router.add_route("*", "/v0/entity", storage_error)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_any_other_status_is_a_server_error() -> None:
    async with stub_node(view=True) as url, Client(url) as kv:
        with pytest.raises(ServerError) as error:
            await kv.put("k", b"v")
    assert error.value.status == 500 and error.value.reason == "storage error: disk on fire"


async def test_a_seed_that_does_not_answer_a_cluster_view_is_unreachable() -> None:
    with pytest.raises(Unreachable) as refused:
        async with Client("http://127.0.0.1:9", connect_timeout=1.0):
            pass
    assert refused.value.url == "http://127.0.0.1:9" and not refused.value.maybe_applied
    async with stub_node(view=False) as url:
        with pytest.raises(Unreachable) as garbage:
            async with Client(url):
                pass
    assert "did not answer a cluster view" in garbage.value.reason
