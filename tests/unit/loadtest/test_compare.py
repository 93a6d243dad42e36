"""loadtest.compare: judging a rate, the capacity search on made-up servers, reading the nodes' replica
counters, and ``compare --quick`` end to end (test_report checks the written conclusion)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from kvnode.coordinator.fanout import FANOUTS
from loadtest.compare import PRECISION, Progress, Verdict, calls_made, judge, replica_calls, search_capacity
from loadtest.openloop import RateResult


def _result(rate: float, p99_ms: float, achieved_share: float = 1.0, lateness_ms: float = 0.1) -> RateResult:
    result = RateResult("put", ["http://127.0.0.1:1"], rate, duration_s=1.0, elapsed_s=1.0)
    result.requests = result.sent = round(rate * achieved_share)
    for _ in range(result.requests):
        result.latency.record_us(p99_ms * 1000)
        result.lateness.record_us(lateness_ms * 1000)
    return result


def test_judge_takes_the_median_of_the_steps() -> None:
    assert judge(100, [_result(100, 10), _result(100, 60), _result(100, 20)], slo_ms=50).passed
    missed = judge(100, [_result(100, 60), _result(100, 10), _result(100, 70)], slo_ms=50)
    assert not missed.passed and missed.reason == "SLO missed (median p99 60.0 ms > 50 ms)"
    short = judge(100, [_result(100, 10, achieved_share=0.9)] * 3, slo_ms=50)
    assert short.reason == "achieved only 90% of the asked rate (median)"
    failing = _result(100, 10)
    failing.errors["504"] = 2
    assert judge(100, [failing] * 3, slo_ms=50).reason == "errors (median 2.0% of requests)"


def test_judge_passes_a_rate_met_despite_a_late_generator_and_says_so() -> None:
    late = _result(100, 10, lateness_ms=5)  # 5 ms late, over the 3 ms floor and a tenth of 10 ms
    assert not late.valid
    # Its lateness is inside the 10 ms it measured: the server met the objective all the same.
    verdict = judge(100, [late, late, _result(100, 10)], slo_ms=50)
    assert verdict.passed and verdict.reason == "generator invalid (lateness p99 5.00 ms > 3.00 ms)"
    one_in_three = judge(100, [late, _result(100, 10), _result(100, 10)], slo_ms=50)
    assert one_in_three.passed and one_in_three.reason == ""
    saturated = _result(100, 80)
    saturated.connection_waits = 50  # a saturated server holds every connection: both reasons are given
    assert judge(100, [saturated] * 3, slo_ms=50).reason == (
        "SLO missed (median p99 80.1 ms > 50 ms); generator invalid (50 requests (50.0%) waited for one "
        "of the 0 connections)"
    )


def _server(capacity: float, judged: list[float]) -> Callable[[float], Verdict]:
    def judge_rate(rate: float) -> Verdict:
        judged.append(rate)
        return Verdict(rate, rate <= capacity, "" if rate <= capacity else "SLO missed")

    return judge_rate


@pytest.mark.parametrize("capacity", [730.0, 9_000.0, 41_000.0])
def test_search_finds_the_capacity_with_no_cap_of_its_own(capacity: float) -> None:
    judged: list[float] = []
    search = search_capacity(_server(capacity, judged), start=500, budget=20)
    assert search.sustained is not None
    assert capacity / (1 + PRECISION) <= search.sustained <= capacity
    assert search.stopped.endswith(f"failed: SLO missed, within {PRECISION:.0%} of it")
    assert [verdict.rate for verdict in search.verdicts] == judged


def test_search_says_when_its_budget_ran_out() -> None:
    search = search_capacity(_server(1e9, []), start=500, budget=3)
    assert search.sustained == 2000
    assert search.stopped == "step budget of 3 rates used up; no rate failed up to 2000/s"
    halfway = search_capacity(_server(1100, []), start=500, budget=3)
    assert halfway.sustained == 1000
    assert halfway.stopped == "step budget of 3 rates used up; 2000/s failed: SLO missed"


def test_search_reports_none_when_nothing_is_sustained() -> None:
    search = search_capacity(_server(0, []), start=500, budget=20)
    assert search.sustained is None
    assert search.stopped.startswith("nothing sustained down to 10/s: ")


def test_time_left_only_shrinks() -> None:
    """Work done and planned work dropped both take from what is left; nothing adds to it (the old
    estimate, scaled by the pace so far, went up and down)."""
    progress = Progress(planned=100.0)
    seen = [progress.left]
    for done, dropped in [(6, 0), (10, 0), (0, 30), (10, 0), (4, 40)]:
        progress.advance(done)
        progress.skip(dropped)
        seen.append(progress.left)
    assert seen == [100, 94, 84, 54, 44, 0]


@pytest.fixture
def metrics_server() -> Iterator[tuple[Callable[[str, str, float], None], str]]:
    """A /metrics endpoint rendered by prometheus_client, as a node's is: (add(peer, outcome, n), url)."""
    registry = CollectorRegistry()
    calls = Counter("kvnode_replica_calls", "replica calls", ["peer", "op", "outcome"], registry=registry)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield (
            lambda peer, outcome, n: calls.labels(peer=peer, op="put", outcome=outcome).inc(n),
            f"http://127.0.0.1:{server.server_address[1]}",
        )
    finally:
        server.shutdown()
        server.server_close()


def test_replica_calls_are_read_from_the_counters_and_differenced(
    metrics_server: tuple[Callable[[str, str, float], None], str],
) -> None:
    add, url = metrics_server
    add("a", "ok", 5)
    before = replica_calls([url, "http://127.0.0.1:9"])  # a node that is down is skipped
    add("a", "ok", 200)
    add("b", "ok", 95)
    add("c", "timeout", 5)
    after = replica_calls([url])
    assert before == {"ok": 5}
    assert calls_made(before, after, requests=100) == {
        "total": 300,
        "per_request": 3.0,
        "by_outcome": {"ok": 295, "timeout": 5},
    }


def test_replica_calls_are_none_where_no_node_exposes_them() -> None:
    assert replica_calls(["http://127.0.0.1:9"]) is None
    assert calls_made(None, None, requests=100) is None


def test_compare_quick_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "report"
    argv = ["compare", "--quick", "--scenarios", "healthy,replica-down", "--search-budget", "2"]
    finished = subprocess.run(
        [sys.executable, "-m", "loadtest", *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "left]" in finished.stderr  # progress lines

    report = (out / "report.md").read_text()
    results = json.loads((out / "results.json").read_text())
    modes = list(FANOUTS)  # every registered mode, without being told
    assert (
        report.index("## Conclusion") < report.index("## How it was measured") < report.index("## Capacity")
    )
    for scenario in ("healthy", "replica-down"):
        section = report.split(f"## {scenario}\n", 1)[1].split("\n## ", 1)[0]
        for mode in modes:
            assert f"| {mode} | common rate |" in section, (scenario, mode)
            assert f"| {mode} | search step 3 |" in section, (scenario, mode)
        for op in ("put", "get"):
            assert (out / "plots" / f"latency-{scenario}-{op}.png").stat().st_size > 10_000
        assert (out / "plots" / f"rate-{scenario}.png").stat().st_size > 10_000
        assert {run["mode"] for run in results["runs"] if run["scenario"] == scenario} == set(modes)
        searched = [row for row in results["searches"] if row["scenario"] == scenario]
        assert {row["mode"] for row in searched} == set(modes)
        for row in searched:
            assert row["stopped"] and len(row["verdicts"]) <= 2
    assert (out / "plots" / "capacity.png").stat().st_size > 10_000
    for run in results["runs"]:
        assert (out / run["hdr"]).read_text().startswith("HISTF")
        assert run["requests"] > 0
        assert {"valid", "cpu_us_per_request", "lateness_ms"} <= set(run["generator"])
        assert "replica_calls" in run  # None where the nodes expose no counters: "n/a" in the report
    assert report.startswith("# Smoke check: ")  # 0.6 s steps and 1 s runs compare nothing

    # The report is drawn again from results.json, and from a results.json written before it kept the
    # "How it was measured" lines (they come from the previous report then).
    (out / "plots" / "capacity.png").unlink()
    for results_json in (results, {name: value for name, value in results.items() if name != "header"}):
        (out / "results.json").write_text(json.dumps(results_json))
        redraw = [sys.executable, "-m", "loadtest", "report", "--out", str(out)]
        finished = subprocess.run(redraw, capture_output=True, text=True, timeout=120)
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert (out / "report.md").read_text() == report
        assert (out / "plots" / "capacity.png").stat().st_size > 10_000
