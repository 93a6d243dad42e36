"""What one constant-rate run measured (:class:`RateResult`: latency from the intended send times, the
generator's lateness, waits for a connection, errors, CPU) and whether it is valid; a worker process's
:class:`Share` of the schedule. loadtest.openloop makes them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvnode.metrics import PERCENTILES, LatencyHistogram
from loadtest.workload import CAS_OUTCOMES

__all__ = ["ERROR_SHARE_LIMIT", "RateResult", "Share"]

# When is a run INVALID? Latency runs from the intended send time, so a request that left late carries
# its lateness in its latency: the generator's delay is reported as the server's. And a request that
# waited inside the generator for a free connection never reached the server on time, so the server was
# offered less concurrency than the open-loop schedule asks for (a 20 ms server behind 64 connections
# cannot take more than 3,200 req/s whatever its capacity). The rule:
# - lateness p99 over max(LATENESS_FLOOR_MS, LATENESS_SHARE x latency p99). Below the share, at most a
#   tenth of the reported p99 can be the generator's own delay. The floor is what the event loop's timers
#   cost even on an idle machine (libuv's timers tick in whole milliseconds, as wrk2's do, and truncate
#   their start to one: a request can leave up to 2 ms late), plus 1 ms of scheduling on shared cores;
#   without it a millisecond server would be unmeasurable, though 3 ms is far below any objective we
#   judge by.
# - more than WAIT_SHARE_LIMIT of the requests waited for a connection. With at most 0.5 % held back,
#   only requests beyond p99.5 can have been delayed by the generator's queue, so the reported p99 still
#   lies between the p99 the server gave and its p99.5.
# - more than ERROR_SHARE_LIMIT of the requests failed (an error status, a refused connection, a
#   timeout). Whatever the cause, the latency and rate figures then describe failures, not the service:
#   a refused connection "answers" in microseconds.
LATENESS_FLOOR_MS = 3.0
LATENESS_SHARE = 0.1
WAIT_SHARE_LIMIT = 0.005
ERROR_SHARE_LIMIT = 0.01


@dataclass(frozen=True)
class Share:
    """One worker's part of a run: request i of the whole schedule is sent by worker ``i % workers``."""

    index: int = 0
    workers: int = 1

    def urls(self, count: int) -> list[int]:
        """The indices of the URLs this share sends to (request i goes to URL ``i % count``)."""
        return sorted({i % count for i in range(self.index, self.index + self.workers * count, self.workers)})


@dataclass
class RateResult:
    """One constant-rate run: what was asked, what happened, and the generator's own figures."""

    op: str
    urls: Sequence[str]
    asked_rate: float
    duration_s: float
    workers: int = 1
    connections: int = 0  # keep-alive connections opened, over every worker
    elapsed_s: float = 0.0  # from the first intended send to the last answer
    sent: int = 0  # requests whose bytes were written
    requests: int = 0  # answered or failed: every request that finished
    errors: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # the cas op's writes, by status
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    lateness: LatencyHistogram = field(default_factory=LatencyHistogram)  # write time - intended time
    connection_waits: int = 0  # requests due while every connection to their URL was busy
    cpu_s: float = 0.0  # user + system CPU of the generator's processes during the run

    @property
    def failed(self) -> int:
        """Requests that failed: an unaccepted status, a connection that failed, a timeout."""
        return sum(self.errors.values())

    @property
    def succeeded(self) -> int:
        return self.requests - self.failed

    @property
    def error_share(self) -> float:
        return self.failed / self.requests if self.requests else 0.0

    @property
    def achieved_rate(self) -> float:
        """Requests that succeeded per second of the run (failures are never throughput): over the
        schedule's duration, or longer if the last answer came after it (the last request is due 1/rate
        before the end, so a fast answer could otherwise make the rate look higher than asked)."""
        span = max(self.elapsed_s, self.duration_s)
        return self.succeeded / span if span > 0 else 0.0

    @property
    def cpu_per_request_us(self) -> float:
        return self.cpu_s / self.requests * 1e6 if self.requests else 0.0

    @property
    def lateness_limit_ms(self) -> float:
        return max(LATENESS_FLOOR_MS, LATENESS_SHARE * self.latency.percentile_ms(99))

    @property
    def invalid_reasons(self) -> list[str]:
        """Why the run is INVALID (empty: it is valid): the generator's own reasons, then too many
        errors; see the rule above."""
        reasons = self.generator_reasons
        if self.error_share > ERROR_SHARE_LIMIT:
            reasons.append(
                f"{self.failed} of {self.requests} requests failed "
                f"({self.error_share:.1%} > {ERROR_SHARE_LIMIT:.0%})"
            )
        return reasons

    @property
    def generator_reasons(self) -> list[str]:
        """Why the generator, not the server, set the pace (empty: it kept to its schedule)."""
        reasons = []
        late, limit = self.lateness.percentile_ms(99), self.lateness_limit_ms
        if late > limit:
            reasons.append(f"lateness p99 {late:.2f} ms > {limit:.2f} ms")
        if self.connection_waits > WAIT_SHARE_LIMIT * max(1, self.sent):
            share = self.connection_waits / max(1, self.sent)
            reasons.append(
                f"{self.connection_waits} requests ({share:.1%}) waited for one of the "
                f"{self.connections} connections"
            )
        return reasons

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons

    def merge(self, other: RateResult) -> None:
        """Add another worker's share of the same run."""
        self.workers += other.workers
        self.connections += other.connections
        self.elapsed_s = max(self.elapsed_s, other.elapsed_s)
        self.sent += other.sent
        self.requests += other.requests
        self.errors.update(other.errors)
        self.outcomes.update(other.outcomes)
        self.latency.add(other.latency)
        self.lateness.add(other.lateness)
        self.connection_waits += other.connection_waits
        self.cpu_s += other.cpu_s

    @property
    def cas_outcomes(self) -> dict[str, int]:
        """The cas op's conditional writes by outcome (applied, not_applied, unknown), any other answer
        by its status."""
        named = dict.fromkeys(CAS_OUTCOMES.values(), 0)
        for status, count in sorted(self.outcomes.items()):
            named[CAS_OUTCOMES.get(status, status)] = count
        return named

    def to_json(self) -> dict[str, Any]:
        summary = {
            "op": self.op,
            "urls": list(self.urls),
            "asked_rate": self.asked_rate,
            "achieved_rate": round(self.achieved_rate, 2),
            "duration_s": self.duration_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "sent": self.sent,
            "requests": self.requests,
            "succeeded": self.succeeded,
            "errors": dict(sorted(self.errors.items())),
            "valid": self.valid,
            "invalid_reasons": self.invalid_reasons,
            "latency_ms": self.latency.summary_ms(),
            "generator": {
                "workers": self.workers,
                "connections": self.connections,
                "cpu_us_per_request": round(self.cpu_per_request_us, 2),
                "lateness_ms": self.lateness.summary_ms(),
                "connection_waits": self.connection_waits,
                # the generator's own verdict: it, not the server, set the pace (errors aside)
                "valid": not self.generator_reasons,
                "invalid_reasons": self.generator_reasons,
            },
        }
        if self.op == "cas":
            summary["cas_writes"] = self.cas_outcomes
        return summary

    def to_wire(self) -> dict[str, Any]:
        """Everything, histograms included, as plain data a worker process can send to its parent."""
        return {
            "op": self.op,
            "urls": list(self.urls),
            "asked_rate": self.asked_rate,
            "duration_s": self.duration_s,
            "workers": self.workers,
            "connections": self.connections,
            "elapsed_s": self.elapsed_s,
            "sent": self.sent,
            "requests": self.requests,
            "errors": dict(self.errors),
            "outcomes": dict(self.outcomes),
            "latency": self.latency.encode(),
            "lateness": self.lateness.encode(),
            "connection_waits": self.connection_waits,
            "cpu_s": self.cpu_s,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> RateResult:
        histograms = {name: LatencyHistogram.decode(data[name]) for name in ("latency", "lateness")}
        counters = {name: Counter(data[name]) for name in ("errors", "outcomes")}
        return cls(**{**data, **counters, **histograms})

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    def write_hdr(self, path: Path) -> None:
        path.write_text(self.latency.encode() + "\n")

    def wrk2_text(self) -> str:
        """The run in wrk2's layout (percentile spectrum, counts, rate, errors), then the generator's
        own figures and the run's verdict."""
        hosts = self.urls[0] + (f" (+{len(self.urls) - 1} more)" if len(self.urls) > 1 else "")
        lines = [
            f"Running {self.duration_s:g}s open-loop test @ {hosts}",
            f"  {self.workers} workers and {self.connections} connections, "
            f"{self.op.upper()}, {self.asked_rate:g} requests/sec asked",
            "  Latency Distribution (HdrHistogram - Recorded Latency, from intended send time)",
        ]
        lines += [f"{p:8.3f}%  {self.latency.percentile_ms(p):10.3f}ms" for p in PERCENTILES]
        lines += [
            f"  {self.requests} requests in {self.elapsed_s:.2f}s ({self.sent} sent), "
            f"{self.succeeded} succeeded",
            f"Requests/sec: {self.achieved_rate:10.2f} succeeded, {self.asked_rate:g} asked",
        ]
        if self.errors:
            by_status = ", ".join(f"{status}: {count}" for status, count in sorted(self.errors.items()))
            lines.append(f"  Errors: {self.failed} ({self.error_share:.1%} of requests; {by_status})")
        if self.op == "cas":
            outcomes = ", ".join(f"{name} {count}" for name, count in self.cas_outcomes.items())
            lines.append(f"  Conditional writes: {outcomes} (of {sum(self.outcomes.values())})")
        late = self.lateness
        lines += [
            f"Generator: {self.cpu_per_request_us:.1f} us CPU/request; lateness p50 "
            f"{late.percentile_ms(50):.3f}ms, p99 {late.percentile_ms(99):.3f}ms, max {late.max_ms:.3f}ms; "
            f"{self.connection_waits} requests waited for a connection",
            "Run VALID" if self.valid else "Run INVALID: " + "; ".join(self.invalid_reasons),
        ]
        return "\n".join(lines)
