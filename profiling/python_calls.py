"""Python calls per request at a node of one (no peer: the HTTP edge, the coordinator and its own
storage), served in this process as kvnode.node.serving serves it, by package (profiling.counts).

The node's event loop runs in this thread under cProfile, and the closed loop (profiling.closed_loop) in a
thread of its own: cProfile follows only the thread that enables it, so the client's calls are not
counted. Every call cProfile sees is counted, functions in C included; a coroutine counts once each time
it resumes.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import cProfile
import dataclasses
import pstats
import tempfile
from pathlib import Path

import uvloop
from aiohttp import web

from kvnode.access.connections import GuardedRunner
from kvnode.config import FanoutMode, NodeConfig
from kvnode.node.app import create_app
from kvnode.node.wiring import open_parts
from kvnode.ops.ports import free_ports
from loadtest.fill import fill as loadtest_fill
from loadtest.workload import Workload
from profiling.closed_loop import WARM_UP, ClosedLoop
from profiling.collapsed import source_package
from profiling.load import LoadError

__all__ = ["python_calls"]


def python_calls(
    workload: Workload, requests: int, connections: int, mode: FanoutMode = "async"
) -> tuple[collections.Counter[str], dict[str, int]]:
    """The Python calls (cProfile's, builtins included) of ``requests`` requests of ``workload`` over
    ``connections`` to a node of one served in this process (a GET load's keys written first), by
    package (profiling.collapsed.source_package: ``kvnode/<package>``, aiohttp, asyncio, ``builtins`` for
    functions in C, ...); and the requests' answers by status."""
    with tempfile.TemporaryDirectory(prefix="kvnode-calls-") as data:
        config = NodeConfig(data_dir=Path(data), port=free_ports(1)[0], fanout=mode)
        config = dataclasses.replace(config, cluster=(config.url,))
        profile, statuses = uvloop.run(_profiled_load(workload, requests, connections, config))
    calls: collections.Counter[str] = collections.Counter()
    for (filename, _line, _name), (_primitive, number, *_times) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        calls[source_package(filename)] += number
    return calls, statuses


async def _profiled_load(
    workload: Workload, requests: int, connections: int, config: NodeConfig
) -> tuple[cProfile.Profile, dict[str, int]]:
    """Serve a node of ``config`` here, fill it for a GET load, warm up, and profile the measured load:
    the profile, and the answers by status."""
    profile = cProfile.Profile()
    async with open_parts(config) as parts:
        runner = GuardedRunner(create_app(parts), parts.connections, config.idle_timeout_s, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, config.host, config.port).start()
            loop = asyncio.get_running_loop()
            client = asyncio.Runner()  # the closed loop's own event loop, run by the driver's thread only
            load = ClosedLoop(config.url, workload, connections)

            def prepare() -> None:
                if workload.op == "get":
                    written, _ = client.run(loadtest_fill([config.url], workload))
                    if written != workload.keys:
                        raise LoadError(f"filled {written} of {workload.keys} keys")
                client.run(load.open())
                client.run(load.run(WARM_UP))

            def finish() -> None:
                load.close()
                client.close()

            with concurrent.futures.ThreadPoolExecutor(1) as driver:
                try:
                    await loop.run_in_executor(driver, prepare)
                    profile.enable()
                    try:
                        statuses = await loop.run_in_executor(driver, client.run, load.run(requests))
                    finally:
                        profile.disable()
                finally:
                    await loop.run_in_executor(driver, finish)
        finally:
            await runner.cleanup()
    return profile, dict(statuses)
