"""``python -m loadtest selfbench`` (``make genbench``): how much load the generator itself can send.

Starts the hello-world app (:mod:`loadtest.hello`, the cheapest server we have) on a free loopback port
and runs the open-loop generator (GET ``/``) at each asked rate and worker count, then prints one
Markdown table of what a load generator is judged by: rate asked and achieved, its lateness p99, its
own CPU per request (its worker processes', from ``time.process_time``), the latency it measured, the
server's CPU per request (from ``/proc``, to see which side ran out), and whether the run was VALID;
then the verdict on the target (:func:`target_verdict`): at least 10,000 req/s VALID and achieved at
no more than 30 µs of generator CPU per request. Figures taken while other programs share the machine
are noisy: the command that reproduces the table is printed with it.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

from kvnode.ops.processes import cpu_seconds
from loadtest.rate_result import RateResult
from loadtest.targets import BenchError, hello_world
from loadtest.workers import GeneratorPool
from loadtest.workload import Workload

__all__ = ["DEFAULT_RATES", "TARGET_CPU_US", "TARGET_RATE", "run_selfbench", "target_verdict"]

DEFAULT_RATES = (2_000.0, 5_000.0, 10_000.0, 12_500.0)
TARGET_RATE = 10_000.0
TARGET_CPU_US = 30.0
_ACHIEVED_SHARE = 0.95  # of the asked rate, in requests that succeeded, for a row to count as achieved


def run_selfbench(rates: Sequence[float], duration: float, workers: Sequence[int], connections: int) -> str:
    """Run every rate with every worker count against a fresh hello-world app; the Markdown table."""
    rows, results = [], []
    try:
        with hello_world() as app:
            urls, server = app.urls, app[0]
            for count in workers:
                with GeneratorPool(count) as pool:
                    for rate in rates:
                        print(
                            f"selfbench: {rate:g} req/s, {count} workers, {duration:g}s",
                            file=sys.stderr,
                            flush=True,
                        )
                        before = cpu_seconds(server.pid)
                        result = pool.run(urls, Workload("get", path="/"), rate, duration, connections)
                        rows.append(_row(result, cpu_seconds(server.pid) - before))
                        results.append(result)
    except BenchError as error:  # the hello-world app did not start
        raise RuntimeError(str(error)) from None
    return "\n".join(
        [
            f"## Load generator self-benchmark: GET / on loadtest.hello, {duration:g}s per row, "
            f"{connections} connections, {os.cpu_count()} cores shared by the app and the generator",
            "",
            "| asked/s | achieved/s | workers | lateness p99 ms | generator µs CPU / req | latency p50 ms "
            "| latency p99 ms | errors | hello-world µs CPU / req | run |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
            f"Target: at least {TARGET_RATE:,.0f} req/s VALID and achieved at no more than "
            f"{TARGET_CPU_US:g} µs of generator CPU per request.",
            "**Verdict: " + target_verdict(results) + "**",
            "Reproduce: `" + reproduce_command(rates, duration, workers, connections) + "`",
        ]
    )


def target_verdict(results: Sequence[RateResult]) -> str:
    """Whether a row met the target, and which; else why the closest row at the target rate missed."""
    shortfalls: list[tuple[str, list[str]]] = []
    for result in results:
        if result.asked_rate < TARGET_RATE:
            continue
        missed = list(result.invalid_reasons)
        if result.achieved_rate < _ACHIEVED_SHARE * result.asked_rate:
            missed.append(f"achieved {result.achieved_rate:,.0f}/s")
        if result.cpu_per_request_us > TARGET_CPU_US:
            missed.append(f"{result.cpu_per_request_us:.1f} µs CPU/request > {TARGET_CPU_US:g}")
        row = f"{result.asked_rate:,.0f} req/s with {result.workers} workers"
        if not missed:
            return f"target met: {row}, VALID at {result.cpu_per_request_us:.1f} µs CPU/request."
        shortfalls.append((row, missed))
    if not shortfalls:
        return f"not judged: no row asked for {TARGET_RATE:,.0f} req/s or more."
    row, missed = min(shortfalls, key=lambda shortfall: len(shortfall[1]))
    return f"target NOT met: the closest row, {row}: " + "; ".join(missed) + "."


def _row(result: RateResult, server_cpu: float) -> str:
    verdict = "VALID" if result.valid else "INVALID: " + "; ".join(result.invalid_reasons)
    server = server_cpu / result.requests * 1e6 if result.requests else 0.0
    cells = [
        f"{result.asked_rate:g}",
        f"{result.achieved_rate:.0f}",
        str(result.workers),
        f"{result.lateness.percentile_ms(99):.2f}",
        f"{result.cpu_per_request_us:.1f}",
        f"{result.latency.percentile_ms(50):.2f}",
        f"{result.latency.percentile_ms(99):.2f}",
        str(sum(result.errors.values())),
        f"{server:.1f}",
        verdict,
    ]
    return "| " + " | ".join(cells) + " |"


def reproduce_command(
    rates: Sequence[float], duration: float, workers: Sequence[int], connections: int
) -> str:
    return shlex.join(
        [
            "python", "-m", "loadtest", "selfbench",
            "--rates", ",".join(f"{rate:g}" for rate in rates),
            "--duration", f"{duration:g}",
            "--workers", ",".join(str(count) for count in workers),
            "--connections", str(connections),
        ]
    )  # fmt: skip
