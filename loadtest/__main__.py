"""``python -m loadtest rate|fill|compare|ui|locust``: constant-rate load, filling a store, the sync-vs-async
report, and Locust on a fresh local cluster (its web UI, or a bounded headless run with reports)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from kvnode.argtypes import choices, http_urls, positive_float, positive_int
from kvnode.config import FanoutMode
from loadtest import interruptible
from loadtest.fill import fill
from loadtest.openloop import run_rate
from loadtest.scenarios import SCENARIOS
from loadtest.workload import OPS, Op, Workload


def _rates(text: str) -> list[float]:
    return [positive_float(part) for part in text.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    rate = commands.add_parser("rate", help="open-loop constant-rate load, latency from intended send time")
    rate.add_argument("--url", type=http_urls, required=True, help="node URLs, comma-separated; round-robin")
    rate.add_argument("--op", choices=OPS, required=True)
    rate.add_argument("--rate", type=positive_float, required=True, help="requests per second, in total")
    rate.add_argument("--duration", type=positive_float, required=True, help="seconds of sending")
    rate.add_argument("--connections", type=int, default=64, help="keep-alive connections, in total")
    rate.add_argument("--json", type=Path, help="write the summary as JSON here")
    rate.add_argument("--hdr", type=Path, help="write the latency histogram (HdrHistogram base64) here")

    filler = commands.add_parser("fill", help="PUT keys 0..N-1 so that GET tests read a filled store")
    filler.add_argument("--url", type=http_urls, required=True, help="node URLs, comma-separated")
    filler.add_argument("--concurrency", type=int, default=32, help="requests in flight")

    for command in (rate, filler):
        command.add_argument("--keys", type=int, default=10_000, help="key space: keys 0 .. N-1")
        command.add_argument("--value-size", type=int, default=100, help="bytes per PUT value")
        command.add_argument("--ack", type=int, help="replicas that must answer (default: the node's)")
        command.add_argument("--from", dest="from_", type=int, help="replicas asked (default: all)")

    compare = commands.add_parser("compare", help="sync vs async fan-out on fresh 3-node clusters")
    compare.add_argument("--rates", type=_rates, help="comma-separated request rates to measure")
    compare.add_argument("--duration", type=positive_float, help="seconds per rate")
    compare.add_argument("--slo-ms", type=positive_float, default=50.0, help="p99 latency objective")
    compare.add_argument("--scenarios", type=choices(SCENARIOS), help=",".join(SCENARIOS))
    compare.add_argument("--modes", type=choices(get_args(FanoutMode)), help="async,sync")
    compare.add_argument("--quick", action="store_true", help="small settings: the whole run in ~2 minutes")
    compare.add_argument("--out", type=Path, default=Path("out/compare"), help="report directory")

    ui = commands.add_parser("ui", help="a fresh filled 3-node cluster and Locust's web UI pointed at it")
    ui.add_argument("--web-port", type=int, default=8089, help="Locust UI port on 127.0.0.1")
    locust = commands.add_parser(
        "locust", help="a fresh filled 3-node cluster under Locust, headless: its HTML and CSV, summary.md"
    )
    locust.add_argument("--duration", type=positive_float, default=30.0, help="seconds of load")
    locust.add_argument("--users", type=positive_int, default=20, help="Locust users, all started at once")
    locust.add_argument("--out", type=Path, default=Path("out/loadtest"), help="report directory")
    for command in (ui, locust):
        command.add_argument("--keys", type=positive_int, default=10_000, help="keys filled = Locust's keys")
        command.add_argument("--fanout", choices=("async", "sync"), default="async", help="nodes' fan-out")
    return parser


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM stop compare, ui and locust, which then stop every process they started. SIGINT is
    set explicitly: a process started in the background by a shell inherits it ignored."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupt)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("compare", "ui", "locust"):
        _stop_on_signals()
    if args.command == "compare":
        from loadtest.compare import CompareSettings, run_compare

        return run_compare(CompareSettings.from_args(args))
    if args.command == "ui":
        from loadtest.locust_cluster import run_ui

        return run_ui(args.web_port, args.keys, args.fanout)
    if args.command == "locust":
        from loadtest.locust_cluster import HeadlessSettings, run_headless

        settings = HeadlessSettings(args.out, args.duration, args.users, args.keys, args.fanout)
        command = shlex.join(["python", "-m", "loadtest", *(sys.argv[1:] if argv is None else argv)])
        return run_headless(settings, command)
    op: Op = args.op if args.command == "rate" else "put"
    workload = Workload(op, args.keys, args.value_size, args.ack, args.from_)
    if args.command == "fill":
        written, failures = interruptible.run(fill(args.url, workload, args.concurrency))
        print(f"filled {written} of {args.keys} keys ({args.value_size}-byte values) on {','.join(args.url)}")
        if failures:
            print(f"failed PUTs by status: {dict(failures)}", file=sys.stderr)
            return 1
        return 0
    result = interruptible.run(run_rate(args.url, workload, args.rate, args.duration, args.connections))
    print(result.wrk2_text())
    if args.json:
        result.write_json(args.json)
    if args.hdr:
        result.write_hdr(args.hdr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # fill or rate stopped by Ctrl-C or SIGTERM: no traceback
        print("loadtest: interrupted", file=sys.stderr)
        sys.exit(130)
