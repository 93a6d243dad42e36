"""loadtest.bench: its report's figures, and its servers: a real cluster started, filled and stopped."""

from __future__ import annotations

from loadtest.bench import Row, render_table
from loadtest.wrk import Measured, WrkResult, lua_script


def _row(target: str, cpu: list[float], calls: int | None = None) -> Row:
    result = WrkResult(requests=10_000, requests_per_sec=1_000, p50=0.002, p99=0.004)
    return Row(
        target, "-" if target == "hello-world" else "async", "put", Measured(result, cpu, 1.0, 10.0), calls
    )


def test_without_spread_the_table_gives_coordinator_and_replica_cpu_against_hello_world() -> None:
    """The replicas' CPU is divided by the calls made to them, not by the requests: a GET asks some of
    them only."""
    rows = [_row("hello-world", [0.5]), _row("kvnode", [1.0, 0.3, 0.3], calls=15_000)]
    kvnode = render_table(rows, spread=False).splitlines()[-1]
    assert "| 100 us (2.00x) | 40 us (0.80x) |" in kvnode
    assert kvnode.count("every node") == 0


def test_the_wrk_script_sends_the_token_when_given() -> None:
    assert '["Authorization"] = "Bearer t0k"' in lua_script("GET", "/v0/entity", 10, 0, 1, "t0k")
    assert "local headers = nil" in lua_script("GET", "/v0/entity", 10, 0, 1)
