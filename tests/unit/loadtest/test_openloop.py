"""loadtest.openloop and loadtest.workers in this process: the rule that marks a run INVALID, results merged
from workers, errors counted against an in-process stub, and the cas op against a stub that judges its
conditions and against nodes served in this process."""

from __future__ import annotations

from collections import Counter

import pytest

from loadtest.openloop import run_rate
from loadtest.rate_result import ERROR_SHARE_LIMIT, LATENESS_FLOOR_MS, RateResult
from loadtest.workload import Workload, key_name
from tests.drivers import Serve, served_members
from tests.entity_stub import Stub


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
    one.outcomes["201"], two.outcomes["201"], two.outcomes["412"] = 4, 5, 6
    one.cpu_s, two.cpu_s, one.elapsed_s, two.elapsed_s = 0.01, 0.02, 1.0, 1.1
    merged = RateResult.from_wire(one.to_wire())
    merged.merge(RateResult.from_wire(two.to_wire()))
    assert (merged.workers, merged.requests, merged.sent, merged.connection_waits) == (2, 400, 400, 2)
    assert merged.errors == {"504": 3, "timeout": 3}
    assert merged.outcomes == {"201": 9, "412": 6}
    assert merged.latency.count == merged.lateness.count == 400
    assert merged.latency.percentile_ms(50) == pytest.approx(3, rel=0.01)
    assert merged.cpu_per_request_us == pytest.approx(0.03 / 400 * 1e6)
    assert merged.elapsed_s == 1.1


# --- errors, fill and the command line, against an in-process stub --------------------------------------


async def test_errors_are_counted_by_status(stub: tuple[Stub, str]) -> None:
    server, url = stub
    server.fail = {key_name(index) for index in range(5)}
    result = await run_rate([url], Workload("put", keys=10), 100, 1.0)
    assert set(result.errors) == {"504"}
    assert 0 < result.errors["504"] < result.requests
    assert result.latency.count == result.requests


async def test_cas_ops_write_over_the_version_read_and_are_counted_by_outcome(stub: tuple[Stub, str]) -> None:
    """A key's first op creates it (its read found no ETag), the next update it (If-Match): every write
    applies, on a key no two ops share at once. A 504 of a write is an unknown outcome and an error; a
    read's error is marked as the read's."""
    server, url = stub
    server.unknown = {key_name(0)}
    server.fail = {key_name(1)}
    result = await run_rate([url], Workload("cas", keys=4), 40, 1.0, connections=1)
    assert result.requests == result.sent == 40 and result.latency.count == 40
    same = Workload("cas", keys=4)  # one connection: the ops go one after the other, in the draw's order
    drawn = Counter(same.random_key() for _ in range(40))
    assert result.errors == {"504": drawn[key_name(0)], "read 504": drawn[key_name(1)]}
    assert server.versions == {key_name(i): drawn[key_name(i)] for i in (2, 3)}
    assert result.outcomes == {"201": drawn[key_name(2)] + drawn[key_name(3)], "504": drawn[key_name(0)]}
    named = {"applied": result.outcomes["201"], "not_applied": 0, "unknown": result.outcomes["504"]}
    assert result.cas_outcomes == result.to_json()["cas_writes"] == named
    applied, unknown, writes = named["applied"], named["unknown"], sum(result.outcomes.values())
    line = f"  Conditional writes: applied {applied}, not_applied 0, unknown {unknown} (of {writes})"
    assert line in result.wrk2_text().splitlines()


async def test_cas_ops_on_served_nodes_agree_with_the_rounds_the_nodes_counted(serve: Serve) -> None:
    """Three keys, six connections, round-robin over three members: ops race on each key. Every op's
    read answers (a plain GET), so each op made one conditional write, and each write's answer is the
    outcome of the round its coordinator counted."""
    nodes = await served_members(serve, 3, timeout_ms=1000)
    result = await run_rate([node.url for node in nodes], Workload("cas", keys=3), 150, 1.0, connections=6)
    assert result.requests == result.sent == 150 and not result.errors.keys() - {"504"}
    assert sum(result.outcomes.values()) == 150 and result.outcomes["201"] > 0
    rounds: Counter[str] = Counter()
    for node in nodes:
        rounds.update(node.parts.paxos.stats.rounds)
    named = {name: rounds[name] for name in ("applied", "not_applied", "unknown")}
    assert result.cas_outcomes == named


async def test_a_dead_url_counts_as_connection_errors() -> None:
    result = await run_rate(["http://127.0.0.1:9"], Workload("get", keys=10), 50, 0.5)
    assert result.errors == {"connection": result.requests}
    assert result.requests == 25 and result.sent == 0
