"""loadtest.openloop against an in-process stub server that stalls for a known time."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from kvnode.metrics import LatencyHistogram
from loadtest.openloop import fill, run_rate
from loadtest.workload import Workload, key_name

STALL_S = 0.3


class Stub:
    """Answers at once with the operation's success status, except: while a stall is armed, every
    answer waits until the stall ends; and a key in ``fail`` answers 504."""

    def __init__(self) -> None:
        self.stall_until = 0.0
        self.fail: set[str] = set()
        self.keys: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        key = request.query["id"]
        self.keys.append(key)
        wait = self.stall_until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if key in self.fail:
            return web.Response(status=504)
        return web.Response(status={"GET": 200, "PUT": 201, "DELETE": 202}[request.method], body=b"v")

    def stall(self, seconds: float) -> None:
        self.stall_until = time.monotonic() + seconds


@pytest.fixture
async def stub() -> AsyncIterator[tuple[Stub, str]]:
    server = Stub()
    app = web.Application()
    app.router.add_route("*", "/v0/entity", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield server, f"http://{host}:{port}"
    await runner.cleanup()


def _later(delay: float, action: Callable[[], None]) -> None:
    asyncio.get_running_loop().call_later(delay, action)


async def test_latency_includes_the_stall_for_every_request_sent_during_it(stub: tuple[Stub, str]) -> None:
    server, url = stub
    rate, duration = 200, 2.0
    # 0.5 s in, the server holds every answer for 300 ms: the ~60 requests due in that window wait
    # between 300 and 0 ms. A closed-loop client would have sent few of them and seen one slow answer.
    _later(0.5, lambda: server.stall(STALL_S))
    result = await run_rate([url], Workload("get", keys=100), rate, duration)

    assert result.requests == result.sent == rate * duration
    assert not result.errors
    stall_ms = STALL_S * 1000
    assert result.latency.max_ms >= 0.9 * stall_ms
    # About 15% of the requests fall in the stall, their latencies spread evenly over 0..300 ms.
    assert result.latency.percentile_ms(99) >= 0.75 * stall_ms
    assert result.latency.percentile_ms(90) >= 0.2 * stall_ms
    assert result.latency.percentile_ms(50) < 0.5 * stall_ms
    assert result.achieved_rate == pytest.approx(rate, rel=0.1)


async def test_errors_are_counted_by_status(stub: tuple[Stub, str]) -> None:
    server, url = stub
    server.fail = {key_name(index) for index in range(5)}
    result = await run_rate([url], Workload("put", keys=10), 100, 1.0)
    assert set(result.errors) == {"504"}
    assert 0 < result.errors["504"] < result.requests
    assert result.latency.count == result.requests


async def test_a_dead_url_counts_as_connection_errors() -> None:
    result = await run_rate(["http://127.0.0.1:9"], Workload("get", keys=10), 50, 0.5)
    assert result.errors == {"connection": result.requests}


async def test_fill_writes_every_key_once(stub: tuple[Stub, str]) -> None:
    server, url = stub
    written, failures = await fill([url], Workload("put", keys=300, value_size=10), concurrency=8)
    assert (written, failures) == (300, {})
    assert sorted(server.keys) == [key_name(index) for index in range(300)]


async def test_rate_command_prints_wrk2_output_and_writes_json_and_hdr(
    stub: tuple[Stub, str], tmp_path: Path
) -> None:
    _, url = stub
    argv = ["-m", "loadtest", "rate", "--url", url, "--op", "get", "--rate", "100", "--duration", "1"]
    argv += ["--json", str(tmp_path / "run.json"), "--hdr", str(tmp_path / "run.hdr")]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    text = stdout.decode()
    for line in ("50.000%", "99.990%", "100.000%", "Requests/sec:", "100 asked"):
        assert line in text
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["op"] == "get" and summary["asked_rate"] == 100 and summary["requests"] == 100
    assert summary["errors"] == {}
    assert set(summary["latency_ms"]) == {"p50", "p75", "p90", "p99", "p99.9", "p99.99", "max"}
    assert set(summary["schedule_lag_ms"]) == set(summary["latency_ms"])
    assert isinstance(summary["generator_fell_behind"], bool)
    assert summary["achieved_rate"] > 0 and summary["duration_s"] == 1
    histogram = LatencyHistogram.decode((tmp_path / "run.hdr").read_text().strip())
    assert histogram.count == 100


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_rate_command_stops_at_once_on_ctrl_c_or_sigterm(stub: tuple[Stub, str], signum: int) -> None:
    """uvloop runs Python-level signal handlers only when its loop wakes, so this guards the loop-level
    handlers of loadtest.interruptible: a 60 s run must end within seconds of the signal."""
    server, url = stub
    argv = ["-m", "loadtest", "rate", "--url", url, "--op", "get", "--rate", "20", "--duration", "60"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(30):
            while not server.keys:  # the run is under way once the stub has seen a request
                await asyncio.sleep(0.05)
        process.send_signal(signum)
        _, stderr = await asyncio.wait_for(process.communicate(), 10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 130, stderr.decode()
    assert b"Traceback" not in stderr
