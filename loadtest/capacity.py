"""The capacity search (pure): a rate's verdict from its repeated steps (p99 within the objective, the asked
rate achieved, few errors; a late generator said, not counted against the target), and the highest rate a
target sustains, found by doubling and then bisecting within a budget of rates.

>>> search_capacity(lambda rate: Verdict(rate, rate <= 3000), start=1000, budget=10).sustained
3000.0
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loadtest.rate_result import ERROR_SHARE_LIMIT, RateResult

__all__ = ["MIN_RATE", "PRECISION", "Search", "Verdict", "judge", "search_capacity"]

PRECISION = 0.1  # the search stops once the highest passing and lowest failing rates are this close
MIN_RATE = 10.0  # below this a search gives up: the mode sustains nothing worth measuring


@dataclass(frozen=True)
class Verdict:
    """A rate's verdict from its repeated steps: passed, and if not, why (in words)."""

    rate: float
    passed: bool
    reason: str = ""


def judge(rate: float, steps: Sequence[RateResult], slo_ms: float) -> Verdict:
    """Pass when the medians over the steps meet the objective: p99 within ``slo_ms``, at least 95 % of
    the asked rate achieved (in requests that succeeded), at most ERROR_SHARE_LIMIT errors. Where the
    generator set the pace in most steps the reason says so, pass or fail, but that alone does not fail
    the rate: latency counts from the intended send time, so a late generator (or a request waiting for
    a connection) only makes the server's figures look worse. A rate that meets the objective anyway
    was sustained; one that fails may have failed by the generator."""
    p99 = statistics.median(step.latency.percentile_ms(99) for step in steps)
    achieved = statistics.median(step.achieved_rate / step.asked_rate for step in steps)
    errors = statistics.median(step.error_share for step in steps)
    reasons = []
    if p99 > slo_ms:
        reasons.append(f"SLO missed (median p99 {p99:.1f} ms > {slo_ms:g} ms)")
    if errors > ERROR_SHARE_LIMIT:
        reasons.append(f"errors (median {errors:.1%} of requests)")
    if achieved < 0.95:
        reasons.append(f"achieved only {achieved:.0%} of the asked rate (median)")
    passed = not reasons
    late = [step for step in steps if step.generator_reasons]
    if len(late) * 2 > len(steps):
        reasons.append("generator invalid (" + "; ".join(late[0].generator_reasons) + ")")
    return Verdict(rate, passed, "; ".join(reasons))


@dataclass
class Search:
    """Where a capacity search ended: the highest rate sustained and the lowest that failed (None: no
    such rate), why it stopped, and every rate it judged, in order."""

    sustained: float | None
    lowest_failed: float | None
    stopped: str
    verdicts: list[Verdict] = field(default_factory=list)


def search_capacity(judge_rate: Callable[[float], Verdict], start: float, budget: int) -> Search:
    """The highest rate ``judge_rate`` passes: from ``start``, double until a rate fails, then bisect
    between the highest pass and the lowest failure until they are within PRECISION of each other.
    At most ``budget`` rates are judged; the search never stops at a rate limit of its own."""
    verdicts: list[Verdict] = []
    low: Verdict | None = None  # the highest rate that passed
    high: Verdict | None = None  # the lowest rate that failed
    rate = float(round(start))
    while len(verdicts) < budget:
        verdict = judge_rate(rate)
        verdicts.append(verdict)
        if verdict.passed:
            low = verdict if low is None or rate > low.rate else low
        else:
            high = verdict if high is None or rate < high.rate else high
        if low and high and high.rate <= low.rate * (1 + PRECISION):
            return Search(low.rate, high.rate, f"{_failed(high)}, within {PRECISION:.0%} of it", verdicts)
        if high is None:
            assert low is not None  # a rate was judged, and it passed
            rate = low.rate * 2
        else:
            rate = float(round((low.rate + high.rate) / 2 if low else high.rate / 2))
        if rate < MIN_RATE:
            assert high is not None
            return Search(
                None, high.rate, f"nothing sustained down to {MIN_RATE:g}/s: {_failed(high)}", verdicts
            )
    tail = f"; {_failed(high)}" if high else f"; no rate failed up to {low.rate:g}/s" if low else ""
    stopped = f"step budget of {budget} rates used up{tail}"
    return Search(low.rate if low else None, high.rate if high else None, stopped, verdicts)


def _failed(verdict: Verdict) -> str:
    return f"{verdict.rate:g}/s failed: {verdict.reason}"
