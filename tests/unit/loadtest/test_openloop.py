"""loadtest.openloop and loadtest.workers: percentiles against servers of known latency (a fixed delay,
a one-off stall) in processes of their own, errors and the CLI against an in-process stub, the rule
that marks a run INVALID, and token-aware routing against a real cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from loadtest.openloop import run_rate
from loadtest.rate_result import ERROR_SHARE_LIMIT, LATENESS_FLOOR_MS, RateResult
from loadtest.workload import Workload, key_name


def _result(latency_ms: float, lateness_ms: float, count: int = 1000, waits: int = 0) -> RateResult:
    result = RateResult(
        "get", ["http://127.0.0.1:1"], 100, 1.0, sent=count, requests=count, connection_waits=waits
    )
    for _ in range(count):
        result.latency.record_us(latency_ms * 1000)
        result.lateness.record_us(lateness_ms * 1000)
    return result


def test_validity_rule_lateness_bound_is_a_floor_or_a_share_of_p99() -> None:
    assert _result(latency_ms=1, lateness_ms=LATENESS_FLOOR_MS * 0.9).valid  # under the floor
    assert not _result(latency_ms=1, lateness_ms=LATENESS_FLOOR_MS * 1.5).valid
    assert _result(latency_ms=100, lateness_ms=9).valid  # under a tenth of p99
    late = _result(latency_ms=100, lateness_ms=12)
    assert late.invalid_reasons == ["lateness p99 12.01 ms > 10.00 ms"]  # HdrHistogram: 3 digits


def test_validity_rule_allows_half_a_percent_of_connection_waits() -> None:
    assert _result(1, 0.1, count=1000, waits=5).valid
    assert not _result(1, 0.1, count=1000, waits=6).valid


def test_validity_rule_allows_one_percent_of_errors() -> None:
    result = _result(1, 0.1, count=1000)
    result.errors["504"] = 10
    assert result.valid and result.succeeded == 990
    result.errors["timeout"] = 1
    assert result.invalid_reasons == [f"11 of 1000 requests failed (1.1% > {ERROR_SHARE_LIMIT:.0%})"]
    assert result.achieved_rate == pytest.approx(989)  # over the 1 s schedule: successes only


def test_worker_results_merge_and_survive_the_wire() -> None:
    one, two = _result(1, 0.1, count=100), _result(3, 0.2, count=300, waits=2)
    one.errors["504"], two.errors["504"], two.errors["timeout"] = 1, 2, 3
    one.cpu_s, two.cpu_s, one.elapsed_s, two.elapsed_s = 0.01, 0.02, 1.0, 1.1
    merged = RateResult.from_wire(one.to_wire())
    merged.merge(RateResult.from_wire(two.to_wire()))
    assert (merged.workers, merged.requests, merged.sent, merged.connection_waits) == (2, 400, 400, 2)
    assert merged.errors == {"504": 3, "timeout": 3}
    assert merged.latency.count == merged.lateness.count == 400
    assert merged.latency.percentile_ms(50) == pytest.approx(3, rel=0.01)
    assert merged.cpu_per_request_us == pytest.approx(0.03 / 400 * 1e6)
    assert merged.elapsed_s == 1.1


# --- errors, fill and the command line, against an in-process stub --------------------------------------


class Stub:
    """Answers at once with the operation's success status, or 504 for a key in ``fail``."""

    def __init__(self) -> None:
        self.fail: set[str] = set()
        self.keys: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        key = request.query["id"]
        self.keys.append(key)
        if key in self.fail:
            return web.Response(status=504)
        return web.Response(status={"GET": 200, "PUT": 201, "DELETE": 202}[request.method], body=b"v")


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
    assert result.requests == 25 and result.sent == 0
