"""Open-loop, constant-rate load with honest latency, as wrk2 measures it.

Request i is due at ``t0 + i / rate`` and is sent then whatever happened to the earlier ones: the
generator never waits for an answer before sending the next request, so a stalled server does not slow
the load down. Each latency is measured from the request's *intended* send time, so time a request
spent queued behind a stall (in the server, or for one of the generator's pooled connections) counts,
which a closed-loop tool such as Locust hides (coordinated omission).

The generator's own lateness (how long after its intended time a request was handed to the client) is
kept apart as the schedule lag: when it is large the generator, not the server, set the pace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from kvnode.metrics import PERCENTILES, LatencyHistogram
from loadtest.fill import fill  # the filler has its own module; imported here for old callers
from loadtest.workload import ENTITY_PATH, Request, Workload

__all__ = ["RateResult", "fill", "run_rate"]

REQUEST_TIMEOUT = 10.0  # seconds; a request still unanswered then counts as a "timeout" error
MAX_IN_FLIGHT = 20_000  # far above any healthy backlog; reaching it means the generator is overloaded
# Schedule lag (p99) above which the generator, not the server, is said to have set the pace.
LAG_LIMIT_MS = 10.0


@dataclass
class RateResult:
    """One constant-rate run: what was asked, what happened, and both histograms."""

    op: str
    urls: Sequence[str]
    asked_rate: float
    duration_s: float
    elapsed_s: float = 0.0  # from the first intended send to the last answer
    sent: int = 0
    requests: int = 0  # answered or failed: every request that finished
    errors: Counter[str] = field(default_factory=Counter)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    schedule_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    cap_waits: int = 0  # sends that waited because MAX_IN_FLIGHT requests were outstanding

    @property
    def achieved_rate(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def generator_fell_behind(self) -> bool:
        return self.cap_waits > 0 or self.schedule_lag.percentile_ms(99) > LAG_LIMIT_MS

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "urls": list(self.urls),
            "asked_rate": self.asked_rate,
            "achieved_rate": round(self.achieved_rate, 2),
            "duration_s": self.duration_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "requests": self.requests,
            "errors": dict(sorted(self.errors.items())),
            "latency_ms": self.latency.summary_ms(),
            "schedule_lag_ms": self.schedule_lag.summary_ms(),
            "in_flight_cap_waits": self.cap_waits,
            "generator_fell_behind": self.generator_fell_behind,
        }

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def write_hdr(self, path: Path) -> None:
        path.write_text(self.latency.encode() + "\n")

    def wrk2_text(self) -> str:
        """The run in wrk2's layout: percentile spectrum, counts, rate, errors, and a warning if due."""
        hosts = self.urls[0] + (f" (+{len(self.urls) - 1} more)" if len(self.urls) > 1 else "")
        lines = [
            f"Running {self.duration_s:g}s open-loop test @ {hosts}",
            f"  {self.op.upper()}, {self.asked_rate:g} requests/sec asked",
            "  Latency Distribution (HdrHistogram - Recorded Latency, from intended send time)",
        ]
        lines += [f"{p:8.3f}%  {self.latency.percentile_ms(p):10.3f}ms" for p in PERCENTILES]
        lines += [
            f"  {self.requests} requests in {self.elapsed_s:.2f}s ({self.sent} sent)",
            f"Requests/sec: {self.achieved_rate:10.2f} achieved, {self.asked_rate:g} asked",
        ]
        if self.errors:
            by_status = ", ".join(f"{status}: {count}" for status, count in sorted(self.errors.items()))
            lines.append(f"  Errors: {sum(self.errors.values())} ({by_status})")
        lag = self.schedule_lag
        lines.append(
            f"  Generator schedule lag: p50 {lag.percentile_ms(50):.3f}ms, "
            f"p99 {lag.percentile_ms(99):.3f}ms, max {lag.max_ms:.3f}ms"
        )
        if self.generator_fell_behind:
            reason = (
                f"{self.cap_waits} sends waited for the in-flight cap of {MAX_IN_FLIGHT}"
                if self.cap_waits
                else f"its p99 schedule lag is over {LAG_LIMIT_MS:g}ms"
            )
            lines.append(
                f"WARNING: the load generator fell behind its own schedule ({reason}): it shares the CPU "
                "with the cluster, so these figures show its limit as much as the server's."
            )
        return "\n".join(lines)


async def run_rate(
    urls: Sequence[str],
    workload: Workload,
    rate: float,
    duration: float,
    connections: int = 64,
) -> RateResult:
    """Send ``rate * duration`` requests at a constant rate, round-robin over ``urls``.

    Bounded in time: it returns at most REQUEST_TIMEOUT seconds after the last send.
    """
    if rate <= 0 or duration <= 0:
        raise ValueError("rate and duration must be positive")
    result = RateResult(workload.op, list(urls), rate, duration)
    total = max(1, round(rate * duration))
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)
    tasks: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()
    # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds.
    clock = time.perf_counter
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def send(url: str, request: Request, intended: float) -> None:
            try:
                status = await _call(session, url, request)
                if not status.isdigit() or request.is_error(int(status), workload.op == "mixed"):
                    result.errors[status] += 1
                result.latency.record_us((clock() - intended) * 1e6)
                result.requests += 1
            finally:
                slots.release()

        t0 = clock()
        index = 0
        while index < total:
            # Send every request already due in one go; sleeping per request would cost more than sending.
            due = min(total, int((clock() - t0) * rate) + 1)
            while index < due:
                if slots.locked():
                    result.cap_waits += 1
                await slots.acquire()
                intended = t0 + index / rate
                result.schedule_lag.record_us((clock() - intended) * 1e6)
                task = loop.create_task(send(urls[index % len(urls)], workload.next_request(), intended))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                index += 1
            result.sent = index
            if index < total:
                await asyncio.sleep(max(0.0, t0 + index / rate - clock()))
        if tasks:
            await asyncio.wait(tasks)
        result.elapsed_s = clock() - t0
    return result


async def _call(session: aiohttp.ClientSession, url: str, request: Request) -> str:
    """The answer's status as text, or the kind of failure: "timeout", "connection" or "client-error"."""
    try:
        async with session.request(
            request.method, url + ENTITY_PATH, params=request.params, data=request.body
        ) as response:
            await response.read()
            return str(response.status)
    except TimeoutError:
        return "timeout"
    except aiohttp.ClientConnectionError:
        return "connection"
    except aiohttp.ClientError:
        return "client-error"
