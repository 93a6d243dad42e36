"""loadtest.bench_conditional: its table and verdicts from known figures, pinned. (Its rows run against a
real cluster: tests/process/loadtest/test_bench_conditional.py.)"""

from __future__ import annotations

from loadtest.bench_conditional import ConditionalRow, render_conditional
from loadtest.wrk import Measured, WrkResult


def row(
    name: str, clients: int, rate: float, p50: float, outcomes: dict[str, int], calls: int
) -> ConditionalRow:
    requests = int(rate * 10)
    result = WrkResult(requests, rate, p50=p50, p99=4 * p50, non_2xx=outcomes.get("not_applied", 0),
                       outcomes=outcomes)  # fmt: skip
    measured = Measured(result, server_cpu=[requests * 200e-6, 1.0, 1.0], wrk_cpu=0.1, elapsed=10.0)
    return ConditionalRow(name, bool(outcomes), clients, measured, calls, peers=2)


def test_the_table_compares_each_row_with_the_put_and_the_contended_with_the_spread() -> None:
    rows = [
        row("PUT", 1, 1000, 0.001, {}, 20_000),
        row(
            "uncontended",
            1,
            400,
            0.0025,
            {"applied": 4000, "not_applied": 0, "unknown": 0, "other": 0},
            24_000,
        ),
        row(
            "8 keys", 8, 1600, 0.005, {"applied": 16_000, "not_applied": 0, "unknown": 0, "other": 0}, 96_000
        ),
        row(
            "one key",
            8,
            1000,
            0.008,
            {"applied": 2500, "not_applied": 7000, "unknown": 500, "other": 0},
            90_000,
        ),
    ]
    assert render_conditional(rows).splitlines() == [
        "| row | clients | writes/s | applied/s | p50 | p99 | p50 vs PUT | coordinator CPU/req "
        "| round trips/write | applied / 412 / 504 | errors |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        "| PUT | 1 | 1,000 | 1,000 | 1.00 ms | 4.00 ms | 1.00x | 200 us | 1.00 | - | 0 |",
        "| uncontended | 1 | 400 | 400 | 2.50 ms | 10.0 ms | 2.50x | 200 us | 3.00 | 4,000 / 0 / 0 | 0 |",
        "| 8 keys | 8 | 1,600 | 1,600 | 5.00 ms | 20.0 ms | 5.00x | 200 us | 3.00 | 16,000 / 0 / 0 | 0 |",
        "| one key | 8 | 1,000 | 250 | 8.00 ms | 32.0 ms | 8.00x | 200 us | 4.50 | 2,500 / 7,000 / 500 | 0 |",
        "",
        "An uncontended conditional write's p50 is 2.50x a plain PUT's (goal: at most 4x): met.",
        "8 clients on one key applied 250 writes/s, 16% of the 1,600/s they applied on 8 keys.",
    ]
