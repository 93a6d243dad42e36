"""The node's ports (kvnode.access.listening): bound before the node serves (refusing connections until
then), a port in use refused in one line, a shared port bound twice, and the site that serves a bound
socket, a TLS handshake that never begins closed after the timeout, and each TLS connection told to the
settler once its handshake timeout has passed."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from kvnode.access.listening import TLS_CONNECTION_BYTES, CannotListen, ListeningSite, bind
from kvnode.access.tls import server_context, verifying_context
from kvnode.config import NodeConfig
from kvnode.ops.certs import NodeCertificate
from kvnode.ops.ports import free_ports
from tests.drivers import PassedSizes
from tests.harness import eventually


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        yield holder.getsockname()[1]


def hello_runner() -> web.AppRunner:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello\n")

    app = web.Application()
    app.router.add_get("/", hello)
    return web.AppRunner(app)


def test_a_bound_port_refuses_connections_before_it_serves() -> None:
    bound = bind("127.0.0.1", free_ports(1)[0], tls=False)
    try:
        assert bound.url == f"http://127.0.0.1:{bound.port}" and len(bound.sockets) == 1
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", bound.port), timeout=5).close()
    finally:
        bound.close()


def test_a_port_in_use_is_refused_in_one_line(taken_port: int) -> None:
    with pytest.raises(CannotListen) as refused:
        bind("127.0.0.1", taken_port, tls=True)
    assert str(refused.value) == f"cannot listen on https://127.0.0.1:{taken_port}: Address already in use"


def test_a_shared_port_is_bound_by_each_process_that_shares_it() -> None:
    first = bind("127.0.0.1", free_ports(1)[0], tls=False, reuse_port=True)
    try:
        second = bind("127.0.0.1", first.port, tls=False, reuse_port=True)
        second.close()
    finally:
        first.close()


async def test_the_site_serves_the_bound_socket() -> None:
    bound = bind("127.0.0.1", free_ports(1)[0], tls=False)
    runner = hello_runner()
    await runner.setup()
    try:
        site = ListeningSite(runner, bound.sockets[0], bound.url, ssl_context=None, handshake_timeout=None)
        assert site.name == bound.url
        await site.start()
        async with aiohttp.ClientSession() as session, session.get(bound.url + "/") as response:
            assert (response.status, await response.text()) == (200, "hello\n")
    finally:
        await runner.cleanup()
        bound.close()


async def test_a_tls_handshake_that_never_begins_is_closed_after_the_timeout_and_told_to_the_settler(
    node_certificate: NodeCertificate, tmp_path: Path
) -> None:
    """Closed before its handshake, a connection's objects are freed only by the collector, and its
    buffers stay in the heap: the settler collects and trims after them (issue 41)."""
    files = node_certificate
    serving = server_context(
        NodeConfig(data_dir=tmp_path, tls_cert=files.cert, tls_key=files.key, tls_ca=files.ca)
    )
    bound = bind("127.0.0.1", free_ports(1)[0], tls=True)
    runner = hello_runner()
    await runner.setup()
    settler = PassedSizes()
    try:
        site = ListeningSite(
            runner, bound.sockets[0], bound.url, ssl_context=serving, handshake_timeout=0.1, settler=settler
        )
        await site.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", bound.port)  # sends no ClientHello
        assert await asyncio.wait_for(reader.read(), 30) == b""  # closed by the server
        writer.close()
        await eventually(lambda: settler.sizes == [TLS_CONNECTION_BYTES], 10, "the settler told")
        async with (  # a client that shakes hands is served
            aiohttp.ClientSession() as session,
            session.get(bound.url + "/", ssl=verifying_context(files.ca)) as response,
        ):
            assert response.status == 200
    finally:
        await runner.cleanup()
        bound.close()
