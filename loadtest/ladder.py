"""``python -m loadtest.ladder``: the highest constant rate a running cluster holds, rung by rung.

For each op (PUT, then GET on the keys the PUTs wrote), constant-rate runs (loadtest.openloop, through a
pool of generator processes kept for the whole ladder) at ``--start``, ``--start + --step``, ... each for
``--duration`` seconds, until a rung misses: p99 over ``--slo-ms``, under 97 % of the asked rate achieved
(failures are never throughput), or over 1 % of requests failed. Latency runs from each request's
intended send time, so a generator that sent late (it shares the machine's cores with the cluster) or
waited for a free connection only makes a rung look worse, never better; each rung shows the
generator's lateness p99 so a reader sees where the shared cores starved it. Before the GETs every key
of the space is written once (loadtest.fill), so a GET never asks for a key no PUT happened to draw.
With ``--pids`` each rung also has the CPU time those processes used per request, summed
(``/proc/PID/stat``), so a higher rate cannot hide a costlier one. One Markdown table on stdout;
progress on stderr.

    python -m loadtest.ladder --url http://127.0.0.1:8080 --start 4000 --step 2000 --pids 11,12,13
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from kvnode.ops.argtypes import ack, http_urls, positive_float, positive_int
from kvnode.ops.processes import cpu_seconds
from loadtest import interruptible
from loadtest.fill import fill
from loadtest.rate_result import RateResult
from loadtest.workers import GeneratorPool
from loadtest.workload import ENTITY_PATH, OPS, Op, Workload

__all__ = ["Rung", "held", "main", "render"]

MIN_ACHIEVED = 0.97  # of the asked rate


@dataclass(frozen=True)
class Rung:
    op: str
    result: RateResult
    server_cpu_s: float | None  # CPU the --pids used during the run, summed


def held(result: RateResult, slo_ms: float) -> str:
    """Why a rung missed ("" when it held)."""
    if result.error_share > 0.01:
        return f"{result.failed} of {result.requests} requests failed"
    p99 = result.latency.percentile_ms(99)
    if p99 > slo_ms:
        return f"p99 {p99:.1f} ms > {slo_ms:g} ms"
    if result.achieved_rate < MIN_ACHIEVED * result.asked_rate:
        return f"achieved {result.achieved_rate:,.0f}/s < {MIN_ACHIEVED:.0%} of the asked rate"
    return ""


def render(rungs: Sequence[Rung], slo_ms: float) -> str:
    lines = [
        "| op | asked/s | achieved/s | p50 | p99 | errors | server CPU/req | generator late p99 | verdict |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for rung in rungs:
        result = rung.result
        cpu = (
            "n/a"
            if rung.server_cpu_s is None or not result.requests
            else (f"{rung.server_cpu_s / result.requests * 1e6:,.0f} µs")
        )
        verdict = held(result, slo_ms) or "held"
        lines.append(
            f"| {rung.op.upper()} | {result.asked_rate:,.0f} | {result.achieved_rate:,.0f} "
            f"| {result.latency.percentile_ms(50):.2f} ms | {result.latency.percentile_ms(99):.2f} ms "
            f"| {result.failed} | {cpu} | {result.lateness.percentile_ms(99):.2f} ms | {verdict} |"
        )
    return "\n".join(lines)


def _climb(pool: GeneratorPool, args: argparse.Namespace, op: Op) -> list[Rung]:
    rungs = []
    rate = args.start
    while rate <= args.max:
        before = sum(cpu_seconds(pid) for pid in args.pids) if args.pids else None
        workload = Workload(op, args.keys, args.value_size, args.ack, args.from_, path=args.path)
        result = pool.run(args.url, workload, rate, args.duration, args.connections)
        used = None if before is None else sum(cpu_seconds(pid) for pid in args.pids) - before
        rungs.append(Rung(op, result, used))
        why = held(result, args.slo_ms)
        print(
            f"{op.upper()} {rate:,.0f}/s: achieved {result.achieved_rate:,.0f}/s, p99 "
            f"{result.latency.percentile_ms(99):.2f} ms, {why or 'held'}",
            file=sys.stderr,
            flush=True,
        )
        if why:
            break
        rate += args.step
    return rungs


def _ops(text: str) -> list[Op]:
    ops = [op for op in text.split(",") if op]
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise argparse.ArgumentTypeError(f"ops are {', '.join(OPS)}; got {text!r}")
    return [cast(Op, op) for op in ops]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtest.ladder", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", type=http_urls, required=True, help="URLs, comma-separated; round-robin")
    parser.add_argument(
        "--ops", type=_ops, default=["put", "get"], help="ops in order, comma-separated (default: put,get)"
    )
    parser.add_argument("--start", type=positive_float, default=2000, help="first rate, per second")
    parser.add_argument("--step", type=positive_float, default=2000, help="added each rung")
    parser.add_argument("--max", type=positive_float, default=100_000, help="the last rate tried")
    parser.add_argument("--duration", type=positive_float, default=10, help="seconds a rung (default 10)")
    parser.add_argument("--connections", type=positive_int, default=64, help="in total (default 64)")
    parser.add_argument("--workers", type=positive_int, default=2, help="generator processes (default 2)")
    parser.add_argument("--keys", type=positive_int, default=10_000, help="key space (default 10,000)")
    parser.add_argument("--value-size", type=positive_int, default=100, help="PUT bytes (default 100)")
    parser.add_argument(
        "--path", default=ENTITY_PATH, help="request path (default: %(default)s; / for loadtest.hello)"
    )
    parser.add_argument(
        "--ack",
        type=ack,
        help="replicas that must answer, or a level by name: quorum, ... (default: the node's)",
    )
    parser.add_argument("--from", dest="from_", type=positive_int, help="replicas asked (default: all)")
    parser.add_argument("--slo-ms", type=positive_float, default=50.0, help="p99 objective (default 50)")
    parser.add_argument(
        "--pids", type=lambda text: [int(pid) for pid in text.split(",") if pid], default=[],
        help="server PIDs whose CPU per request each rung reports, summed",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="write every rung's figures here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    rungs: list[Rung] = []
    with GeneratorPool(args.workers) as pool:
        for op in args.ops:
            if op == "get" and args.path == ENTITY_PATH:
                workload = Workload("put", args.keys, args.value_size, args.ack, args.from_)
                _, failures = interruptible.run(fill(args.url, workload))
                if failures:
                    raise RuntimeError(f"the fill failed for {sum(failures.values())} keys: {failures}")
            rungs += _climb(pool, args, op)
    print(render(rungs, args.slo_ms))
    cores = os.cpu_count()
    print(
        f"\n{args.workers} generator processes, {args.connections} connections, {args.duration:g} s a rung; "
        f"server CPU/req summed over {len(args.pids)} processes; {cores} cores shared by all of them."
    )
    if args.json is not None:
        args.json.write_text(
            json.dumps([{**r.result.to_json(), "server_cpu_s": r.server_cpu_s} for r in rungs])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
