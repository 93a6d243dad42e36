"""loadtest.wrk: wrk output parsing, merging concurrent wrk runs, the generated script, and wrk run end
to end against the hello-world app."""

from __future__ import annotations

import pytest

from loadtest.workload import key_name
from loadtest.wrk import (
    QUANTILE_STEPS,
    WrkResult,
    conditional_lua_script,
    format_latency,
    lua_script,
    merge_results,
    parse_time,
    parse_wrk_output,
    split_connections,
)

# Verbatim wrk 4.1.0 output, plus the error lines wrk prints only when there are errors.
WRK_OUTPUT = """\
Running 5s test @ http://127.0.0.1:8080
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    12.31ms    9.02ms 144.20ms   91.03%
    Req/Sec     4.49k     1.57k    7.84k    80.00%
  Latency Distribution
     50%  714.00us
     75%    0.99ms
     90%    2.77ms
     99%    1.05s
  22390 requests in 5.01s, 3.37MB read
  Socket errors: connect 1, read 2, write 3, timeout 4
  Non-2xx or 3xx responses: 17
Requests/sec:   4469.06
Transfer/sec:    688.94KB
"""


def test_format_latency() -> None:
    assert format_latency(714e-6) == "0.71 ms"
    assert format_latency(0.0123) == "12.3 ms"
    assert format_latency(1.5) == "1,500 ms"


def test_parse_time_units() -> None:
    assert parse_time("714.00us") == pytest.approx(714e-6)
    assert parse_time("0.99ms") == pytest.approx(0.99e-3)
    assert parse_time("1.05s") == pytest.approx(1.05)
    assert parse_time("1.50m") == pytest.approx(90.0)
    assert parse_time("2h") == pytest.approx(7200.0)
    with pytest.raises(ValueError):
        parse_time("1.0KB")


def test_parse_wrk_output() -> None:
    result = parse_wrk_output(WRK_OUTPUT)
    assert result.requests == 22390
    assert result.requests_per_sec == pytest.approx(4469.06)
    assert result.p50 == pytest.approx(714e-6)
    assert result.p99 == pytest.approx(1.05)
    assert (result.non_2xx, result.socket_errors, result.errors) == (17, 10, 27)
    assert result.quantiles == ()


def test_parse_wrk_output_without_errors_and_with_quantiles() -> None:
    lines = [line for line in WRK_OUTPUT.splitlines() if "errors" not in line and "Non-2xx" not in line]
    quantiles = [f"wrk-quantile {i / 10:.1f} {i}" for i in range(1, QUANTILE_STEPS + 1)]
    result = parse_wrk_output("\n".join(lines + quantiles) + "\n")
    assert result.errors == 0
    assert len(result.quantiles) == QUANTILE_STEPS
    assert result.quantiles[0] == pytest.approx(1e-6)
    assert result.quantiles[-1] == pytest.approx(1000e-6)


def test_parse_wrk_output_names_what_is_missing() -> None:
    without_latency = "\n".join(line for line in WRK_OUTPUT.splitlines() if "%" not in line)
    with pytest.raises(ValueError, match="50% latency"):
        parse_wrk_output(without_latency)
    with pytest.raises(ValueError, match="Requests/sec"):
        parse_wrk_output("wrk: connection refused\n")


def _result(requests: int, rate: float, quantiles: tuple[float, ...] = ()) -> WrkResult:
    return WrkResult(requests, rate, p50=0.001, p99=0.002, non_2xx=1, socket_errors=2, quantiles=quantiles)


def test_merge_adds_rates_and_errors() -> None:
    merged = merge_results([_result(100, 10.0), _result(300, 30.0)])
    assert (merged.requests, merged.requests_per_sec, merged.non_2xx, merged.socket_errors) == (
        400,
        40.0,
        2,
        4,
    )
    assert (merged.p50, merged.p99) == (0.001, 0.002)  # no quantiles: the worst of each


def test_merge_weights_latency_by_requests() -> None:
    fast = tuple([0.001] * QUANTILE_STEPS)
    slow = tuple([0.100] * QUANTILE_STEPS)
    # 3/4 of the requests were fast: the median is fast, the 99th percentile slow.
    merged = merge_results([_result(300, 30.0, fast), _result(100, 10.0, slow)])
    assert merged.p50 == pytest.approx(0.001)
    assert merged.p99 == pytest.approx(0.100)
    # Half and half: the median is the last fast point.
    even = merge_results([_result(100, 10.0, fast), _result(100, 10.0, slow)])
    assert even.p50 == pytest.approx(0.001)


def test_a_conditional_scripts_outcomes_are_parsed_and_merged() -> None:
    text = WRK_OUTPUT + "wrk-outcomes applied 20 not_applied 3 unknown 1 other 0\n"
    result = parse_wrk_output(text)
    assert result.outcomes == {"applied": 20, "not_applied": 3, "unknown": 1, "other": 0}
    assert parse_wrk_output(WRK_OUTPUT).outcomes == {}
    merged = merge_results([result, result])
    assert merged.outcomes == {"applied": 40, "not_applied": 6, "unknown": 2, "other": 0}


def test_merge_of_one_is_that_one() -> None:
    single = _result(5, 1.0)
    assert merge_results([single]) is single


def test_split_connections() -> None:
    assert split_connections(64, 3) == [22, 21, 21]
    assert split_connections(64, 1) == [64]
    assert sum(split_connections(100, 3)) == 100
    with pytest.raises(ValueError):
        split_connections(2, 3)


def test_the_conditional_script_writes_over_the_version_the_last_answer_named() -> None:
    script = conditional_lua_script("/v0/entity", "k", value_size=4, token="t0k")
    assert 'local target = "/v0/entity?id=k"' in script and 'local auth = "Bearer t0k"' in script
    assert 'if etag then headers["If-Match"] = etag else headers["If-None-Match"] = "*" end' in script
    assert 'etag = headers["ETag"]' in script and "wrk-quantile" in script and "wrk-outcomes" in script
    assert "local auth = nil" in conditional_lua_script("/v0/entity", "k", value_size=4)


def test_lua_script_names_keys_like_the_fill() -> None:
    script = lua_script("PUT", "/v0/entity", keys=10, value_size=100, seed=7)
    assert 'string.format("key-%08d"' in script and key_name(3) == "key-00000003"
    assert 'string.rep("v", 100)' in script and "math.randomseed(7)" in script
    assert "local body = nil" in lua_script("GET", "/", keys=10, value_size=100, seed=1)
