"""Serving a node (kvnode.node.serving) in this process: it serves until SIGTERM and then stops with
status 0; a start that cannot be made exits 2 with one line, leaving behind no data dir it made.
(tests/cluster/test_node_lifecycle.py runs real node processes.)"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from kvnode.config import NodeConfig
from kvnode.node.serving import _first_missing, serve
from kvnode.ops.ports import free_ports


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """serve() freezes what exists into the garbage collector's permanent generation: thaw it after."""
    yield
    gc.unfreeze()


async def status_of(url: str) -> int:
    try:
        async with aiohttp.ClientSession() as session, session.get(url + "/v0/status") as response:
            return response.status
    except aiohttp.ClientConnectionError:
        return 0


async def test_a_node_serves_until_sigterm_and_stops_with_status_0(tmp_path: Path, unfrozen: None) -> None:
    config = NodeConfig(data_dir=tmp_path / "data", port=free_ports(1)[0])
    serving = asyncio.create_task(serve(config))
    try:
        deadline = time.monotonic() + 60
        while await status_of(config.url) != 200:  # polled until it serves, or ended, or the deadline
            assert not serving.done(), serving.result()
            assert time.monotonic() < deadline, "the node did not serve within 60 s"
            await asyncio.sleep(0.02)
        # Its signal handlers were installed in the same step as its sites started, before any answer.
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(serving, 60) == 0
        assert await status_of(config.url) == 0  # no longer listening
    finally:
        serving.cancel()


async def test_a_port_in_use_exits_2_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        config = NodeConfig(data_dir=tmp_path / "data", port=port)
        assert await serve(config) == 2
    assert (
        capsys.readouterr().err
        == f"kvnode: cannot listen on http://127.0.0.1:{port}: Address already in use\n"
    )
    assert not config.data_dir.exists()  # bound before anything else: nothing was made


async def test_a_failed_start_removes_the_data_dir_and_parents_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = f"http://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    config = NodeConfig(data_dir=tmp_path / "made" / "data", port=free_ports(1)[0], join=seed, timeout_ms=200)
    assert await serve(config) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvnode: ") and seed in err and err.count("\n") == 1, err
    assert not (tmp_path / "made").exists()


def test_the_outermost_missing_directory_is_the_one_to_remove(tmp_path: Path) -> None:
    assert _first_missing(tmp_path) is None
    assert _first_missing(tmp_path / "a" / "b" / "c") == tmp_path / "a"
