"""``python -m loadtest rate|fill|compare|report|selfbench|ui|locust|healing|join|backup|scale|stalls|wan``:
constant-rate load, filling a store, the fan-out comparison (and its report drawn again from its results),
the load generator's own benchmark, Locust on a fresh local cluster (its web UI, or a bounded headless run
with reports), what healing, a join, and a backup and restore cost, each measured under load, what a
request costs as the cluster grows (one constant-rate load on 3, 6 and 12 members), each node's worst
event-loop lag during each long job (stalls), and latency by consistency level across a WAN (wan)."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from kvnode.client import Client, KvnodeError
from kvnode.coordinator.fanout import FANOUTS
from kvnode.ops.argtypes import ack, choices, comma_list, http_urls, positive_float, positive_int, token_file
from kvnode.ops.extras import needs
from loadtest import interruptible
from loadtest.fill import describe_failures, fill
from loadtest.openloop import run_rate
from loadtest.rate_result import RateResult
from loadtest.scenarios import SCENARIOS
from loadtest.workload import ENTITY_PATH, OPS, Op, Workload

ROUTINGS = ("token-aware", "round-robin")
# The commands that draw plots (matplotlib) or run Locust: the load extra, which `make run` leaves out. The
# others (rate, fill, selfbench, stalls) need kvnode's own dependencies only.
NEEDS_LOAD_EXTRA = frozenset(
    {"compare", "report", "ui", "locust", "healing", "join", "backup", "scale", "wan"}
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    modes = list(FANOUTS)

    rate = commands.add_parser("rate", help="open-loop constant-rate load, latency from intended send time")
    rate.add_argument(
        "--url", type=http_urls, required=True, help="node URLs, comma-separated (the first one a seed)"
    )
    rate.add_argument(
        "--op",
        choices=OPS,
        required=True,
        help="cas: a read, then a conditional write over the version read (If-Match, or If-None-Match: * "
        "where there was none); counted by outcome: applied, not_applied (412), unknown (504)",
    )
    rate.add_argument("--rate", type=positive_float, required=True, help="requests per second, in total")
    rate.add_argument("--duration", type=positive_float, required=True, help="seconds of sending")
    rate.add_argument("--connections", type=positive_int, default=64, help="keep-alive connections, in total")
    rate.add_argument(
        "--workers", type=positive_int, default=1, help="generator processes sharing the rate (default: 1)"
    )
    rate.add_argument(
        "--path", default=ENTITY_PATH, help="request path (default: %(default)s; / for loadtest.hello)"
    )
    rate.add_argument(
        "--routing",
        choices=ROUTINGS,
        help="token-aware (the default for kvnode's --path): each request to its key's first owner among the "
        "members the first --url names in /v0/cluster, as kvnode.client does, so one of its from replica "
        "calls is local; round-robin (the default for another --path): over --url, so a request whose "
        "coordinator owns no copy of its key makes from remote replica calls",
    )
    rate.add_argument("--json", type=Path, help="write the summary as JSON here")
    rate.add_argument("--hdr", type=Path, help="write the latency histogram (HdrHistogram base64) here")

    filler = commands.add_parser("fill", help="PUT keys 0..N-1 so that GET tests read a filled store")
    filler.add_argument("--url", type=http_urls, required=True, help="node URLs, comma-separated")
    filler.add_argument("--concurrency", type=int, default=32, help="requests in flight")

    for command in (rate, filler):
        command.add_argument("--keys", type=int, default=10_000, help="key space: keys 0 .. N-1")
        command.add_argument("--value-size", type=int, default=100, help="bytes per PUT value")
        command.add_argument(
            "--ack",
            type=ack,
            help="replicas that must answer, or a consistency level by name: one, quorum, local_quorum, "
            "each_quorum, all (without --from) (default: the node's)",
        )
        command.add_argument("--from", dest="from_", type=int, help="replicas asked (default: all)")
        command.add_argument(
            "--token-file",
            dest="token",
            type=token_file,
            help="file whose first line is the client token sent with every request (--auth-tokens-file)",
        )

    compare = commands.add_parser("compare", help="the fan-out modes on fresh 3-node clusters, to capacity")
    compare.add_argument("--rates", type=comma_list(positive_float), help="common rates, comma-separated")
    compare.add_argument("--duration", type=positive_float, help="seconds per common rate")
    compare.add_argument("--slo-ms", type=positive_float, default=50.0, help="p99 latency objective")
    compare.add_argument("--scenarios", type=choices(SCENARIOS), help=",".join(SCENARIOS))
    compare.add_argument("--modes", type=choices(modes), help=",".join(modes))
    compare.add_argument("--search-duration", type=positive_float, help="seconds per capacity-search step")
    compare.add_argument(
        "--repeats", type=_at_least(3), default=3, help="steps per searched rate, median decides (≥ 3)"
    )
    compare.add_argument("--search-budget", type=positive_int, help="rates a capacity search may try")
    compare.add_argument(
        "--workers",
        type=positive_int,
        default=os.cpu_count() or 1,
        help="generator processes (default: cores)",
    )
    compare.add_argument("--connections", type=positive_int, default=256, help="keep-alive connections")
    compare.add_argument("--quick", action="store_true", help="small settings: the whole run in ~4 minutes")
    compare.add_argument("--out", type=Path, default=Path("out/compare"), help="report directory")
    redraw = commands.add_parser("report", help="draw a compare report again from its results.json")
    redraw.add_argument("--out", type=Path, required=True, help="a directory written by compare")

    selfbench = commands.add_parser(
        "selfbench", help="the generator's own capacity, against a hello-world app"
    )
    selfbench.add_argument(
        "--rates", type=comma_list(positive_float), default=[2000.0, 5000.0, 10000.0, 12500.0],
        help="asked rates, comma-separated (default: 2000,5000,10000,12500)",
    )  # fmt: skip
    selfbench.add_argument(
        "--duration", type=positive_float, default=5.0, help="seconds per row (default: 5)"
    )
    selfbench.add_argument(
        "--workers", type=comma_list(positive_int), default=[1, 2], help="worker counts (default: 1,2)"
    )
    selfbench.add_argument(
        "--connections", type=positive_int, default=256, help="keep-alive connections (default: 256)"
    )

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
        command.add_argument("--fanout", choices=modes, default="async", help="nodes' fan-out")
    # Parsed by loadtest.healing itself (main hands it the arguments); listed here for --help.
    commands.add_parser(
        "healing", add_help=False, help="a wiped node rebuilt under load, an idle cluster's repair traffic"
    )
    commands.add_parser("join", add_help=False, help="a 4th node joining a filled cluster under load")
    commands.add_parser("backup", add_help=False, help="a backup and restores of a filled cluster under load")
    commands.add_parser(
        "scale", add_help=False, help="one constant-rate load on 3, 6 and 12 members: the work per request"
    )
    commands.add_parser("stalls", add_help=False, help="each node's worst loop lag during each long job")
    commands.add_parser(
        "wan", add_help=False, help="latency by consistency level, one datacenter against two across a WAN"
    )
    return parser


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        number = positive_int(text)
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text!r}")
        return number

    return parse


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM stop the command, which then stops every process it started. SIGINT is set
    explicitly: a process started in the background by a shell inherits it ignored."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, interrupt)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in NEEDS_LOAD_EXTRA:
        refusal = needs(f"python -m loadtest {arguments[0]}", ["load"])
        if refusal:
            print(refusal, file=sys.stderr)
            return 2
    measurements = (["healing"], ["join"], ["backup"], ["scale"], ["stalls"], ["wan"])
    if arguments[:1] in measurements:  # measurements with their own parsers
        measurement = importlib.import_module(f"loadtest.{arguments[0]}")
        _stop_on_signals()
        code: int = measurement.main(arguments[1:], shlex.join(["python", "-m", "loadtest", *arguments]))
        return code
    parser = _parser()
    args = parser.parse_args(argv)
    _stop_on_signals()
    if args.command == "compare":
        from loadtest.compare import CompareSettings, run_compare

        return run_compare(CompareSettings.from_args(args))
    if args.command == "report":
        from loadtest.compare import rewrite_report

        print(f"report: {rewrite_report(args.out)}")
        return 0
    if args.command == "selfbench":
        from loadtest.selfbench import run_selfbench

        print(run_selfbench(args.rates, args.duration, args.workers, args.connections))
        return 0
    if args.command == "ui":
        from loadtest.locust_cluster import run_ui

        return run_ui(args.web_port, args.keys, args.fanout)
    if args.command == "locust":
        from loadtest.locust_cluster import HeadlessSettings, run_headless

        settings = HeadlessSettings(args.out, args.duration, args.users, args.keys, args.fanout)
        command = shlex.join(["python", "-m", "loadtest", *(sys.argv[1:] if argv is None else argv)])
        return run_headless(settings, command)
    rate = args.command == "rate"
    op: Op = args.op if rate else "put"
    path = args.path if rate else ENTITY_PATH
    token = args.token or ""
    try:
        workload = Workload(op, args.keys, args.value_size, args.ack, args.from_, path=path, token=token)
    except ValueError as error:  # a combination the workload refuses, such as cas with --ack
        parser.error(str(error))
    if args.command == "fill":
        written, failures = interruptible.run(fill(args.url, workload, args.concurrency))
        print(f"filled {written} of {args.keys} keys ({args.value_size}-byte values) on {','.join(args.url)}")
        if failures:
            print(f"loadtest fill: {describe_failures(failures)}", file=sys.stderr)
            return 1
        return 0
    token_aware = (args.routing or _default_routing(path)) == "token-aware"
    if token_aware:
        try:
            args.url = interruptible.run(_members(args.url[0], args.token))
        except KvnodeError as error:  # no kvnode there (a hello-world, another store): no members to learn
            unknown = (
                f"token-aware routing learns the members from /v0/cluster: {error.url} gave none "
                f"({error.reason})"
            )
            if args.routing:
                advice = "for a server that is not kvnode, give --routing round-robin"
                print(f"loadtest rate: {unknown}; {advice}", file=sys.stderr)
                return 2
            token_aware = False
            print(f"round-robin over --url, as --routing round-robin: {unknown}")
        else:
            print(f"token-aware: each request to its key's first owner of {','.join(args.url)}")
    result = _rate(args, workload, token_aware)
    print(result.wrk2_text())
    if args.json:
        result.write_json(args.json)
    if args.hdr:
        result.write_hdr(args.hdr)
    if result.requests and not result.succeeded:  # figures of failures only: a script must not take them
        how = ", ".join(f"{reason}: {count}" for reason, count in sorted(result.errors.items()))
        print(f"loadtest rate: all {result.requests} requests failed ({how})", file=sys.stderr)
        return 1
    return 0


def _default_routing(path: str) -> str:
    """Token-aware for kvnode's entities; round-robin for anything else (loadtest.hello has no cluster)."""
    return "token-aware" if path == ENTITY_PATH else "round-robin"


async def _members(url: str, token: str | None) -> list[str]:
    """The cluster's members, as the node at ``url`` names them (placement hashes these exact URLs)."""
    async with Client(url, token=token) as client:
        return list(client.members)


def _rate(args: argparse.Namespace, workload: Workload, token_aware: bool) -> RateResult:
    """One worker runs in this process; more are processes of their own (loadtest.workers)."""
    if args.workers == 1:
        return interruptible.run(
            run_rate(args.url, workload, args.rate, args.duration, args.connections, token_aware=token_aware)
        )
    from loadtest.workers import GeneratorPool

    with GeneratorPool(args.workers) as pool:
        return pool.run(args.url, workload, args.rate, args.duration, args.connections, token_aware)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # stopped by Ctrl-C or SIGTERM: no traceback
        print("loadtest: interrupted", file=sys.stderr)
        sys.exit(130)
    except RuntimeError as error:  # a generator worker that failed, a server that did not start
        print(f"loadtest: {error}", file=sys.stderr)
        sys.exit(1)
