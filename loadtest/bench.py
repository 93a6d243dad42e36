"""``python -m loadtest.bench``: a fresh 3-node kvnode cluster per fan-out mode under wrk, next to an
aiohttp hello-world (loadtest.hello) driven the same way, printed as one Markdown table; then, on the
first cluster, the conditional-write rows (loadtest.bench_conditional) in a table of their own.

For each mode the cluster is started on free loopback ports (kvnode.ops.local_cluster), filled with the GET
key space (loadtest.fill), then driven by wrk (loadtest.wrk: GET and PUT on random keys of that space).
One target runs at a time, so the only competition is the machine's other tenants. Every process
started here is stopped by PID (SIGTERM, then SIGKILL after a deadline), also on Ctrl-C or SIGTERM, and
the temporary directory (LevelDB data, wrk scripts and outputs) is removed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import cast, get_args

from kvnode import hot_path
from kvnode.config import FanoutMode
from kvnode.ops.argtypes import choices, non_negative_int, positive_int
from loadtest.bench_conditional import (
    CONTENDING_CLIENTS,
    ConditionalRow,
    measure_conditional,
    render_conditional,
)
from loadtest.replica_calls import REQUEST_OPS, replica_calls
from loadtest.targets import (
    GUARDS,
    NODES,
    TOKEN,
    BenchError,
    fill_cluster,
    hello_world,
    kvnode_cluster,
    progress,
)
from loadtest.wrk import (
    Measured,
    WrkError,
    WrkResult,
    ensure_wrk,
    format_latency,
    lua_script,
    run_wrk,
    split_connections,
)

__all__ = ["main", "render_table"]

OPS = ("get", "put")
MODES: tuple[str, ...] = get_args(FanoutMode)


@dataclass(frozen=True, slots=True)
class Row:
    target: str
    mode: str
    op: str
    measured: Measured
    replica_calls: int | None = None  # the first node's calls to the other nodes (--no-spread)

    @property
    def server_cpu_per_request(self) -> float | None:
        requests = self.measured.result.requests
        return sum(self.measured.server_cpu) / requests if requests else None

    @property
    def first_cpu_per_request(self) -> float | None:
        """The first server process's CPU per request: with --no-spread, the only coordinator's."""
        requests = self.measured.result.requests
        return self.measured.server_cpu[0] / requests if requests else None

    @property
    def replica_cpu_per_call(self) -> float | None:
        """The other nodes' CPU per call the first node made to them: with --no-spread they only answer
        its replica calls, so this is a replica's cost per call."""
        calls = self.replica_calls
        return sum(self.measured.server_cpu[1:]) / calls if calls else None


def _format_errors(result: WrkResult) -> str:
    if not result.errors:
        return "0"
    return f"{result.errors:,} (status {result.non_2xx:,}, socket {result.socket_errors:,})"


def _micros(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e6:,.0f} us"


def render_table(rows: Sequence[Row], spread: bool = True) -> str:
    """One line a row. ``processes``: the server processes whose CPU is summed in server CPU/req. Without
    ``spread`` the first node is the only coordinator: its CPU per request, against the hello-world's."""
    hello = {row.op: row for row in rows if row.target == "hello-world"}
    lines = [
        "| target | mode | op | processes | req/s | p50 | p99 | errors | vs hello-world | server CPU/req "
        "| coordinator CPU/req | replica CPU/call |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        result = row.measured.result
        reference = hello.get(row.op)
        rate = reference.measured.result.requests_per_sec if reference else 0
        ratio = f"{result.requests_per_sec / rate:.2f}x" if rate else "n/a"
        coordinator = (
            "every node" if spread and row.target != "hello-world" else _micros(row.first_cpu_per_request)
        )
        base = reference.first_cpu_per_request if reference else None
        mine = row.first_cpu_per_request
        replica = "every node" if spread else "-"
        if not spread and row.target != "hello-world" and base and mine is not None:
            coordinator += f" ({mine / base:.2f}x)"
            per_call = row.replica_cpu_per_call
            replica = "n/a" if per_call is None else f"{_micros(per_call)} ({per_call / base:.2f}x)"
        lines.append(
            f"| {row.target} | {row.mode} | {row.op.upper()} | {len(row.measured.server_cpu)} "
            f"| {result.requests_per_sec:,.0f} | {format_latency(result.p50)} | {format_latency(result.p99)} "
            f"| {_format_errors(result)} | {ratio} | {_micros(row.server_cpu_per_request)} | {coordinator} "
            f"| {replica} |"
        )
    return "\n".join(lines)


def _load_line(args: argparse.Namespace) -> str:
    if args.spread:
        shares = "+".join(str(share) for share in split_connections(args.connections, NODES))
        return (
            f"Load (--spread): {NODES} wrk processes at once, -t1 and {shares} connections, one per node, "
            f"so every node coordinates; the hello-world app gets the same {NODES} processes on its one port."
        )
    return (
        f"Load (--no-spread): one wrk process, -t1 -c{args.connections}, all of it sent to the first node "
        "(the only coordinator); the hello-world app gets the same wrk process."
    )


def _caveat(args: argparse.Namespace) -> str:
    """What the ratio column can and cannot say under this load shape."""
    if args.spread:
        return (
            f"With --spread the {NODES} nodes can use every core while the hello-world app, one process, "
            "uses at most one: the ratio flatters kvnode's throughput where the machine has cores to spare; "
            "server CPU/req does not depend on that."
        )
    return (
        "With --no-spread the first node's one event loop (at most one core) bounds kvnode, as one "
        "process bounds the hello-world app; the other nodes only answer replica calls."
    )


def reproduce_command(args: argparse.Namespace) -> str:
    argv = [
        "python", "-m", "loadtest.bench",
        "--duration", str(args.duration), "--connections", str(args.connections),
        "--modes", ",".join(args.modes), "--ops", ",".join(args.ops), "--guards", ",".join(args.guards),
        "--keys", str(args.keys), "--value-size", str(args.value_size),
        "--spread" if args.spread else "--no-spread",
        "--conditional" if args.conditional else "--no-conditional",
    ]  # fmt: skip
    return shlex.join(argv)


def report(rows: Sequence[Row], args: argparse.Namespace) -> str:
    cores = os.cpu_count()
    return "\n".join(
        [
            f"## kvnode ({NODES} nodes) vs aiohttp hello-world under wrk, {args.duration}s per row",
            "",
            _load_line(args),
            f"PUT: {args.value_size}-byte values, default quorum (ack=2, from=3); GET: default quorum; "
            f"keys uniformly random among the {args.keys:,} filled ones.",
            _hot_path_line(),
            "",
            render_table(rows, args.spread),
            "",
            f"Reproduce: `{reproduce_command(args)}`",
            "",
            f"The cluster, the hello-world app, wrk and everything else share this machine's {cores} cores "
            f"(os.cpu_count() = {cores}): the figures compare targets; they do not measure a dedicated "
            "server. server CPU/req is the CPU time all server processes (every node) used during the "
            "row, per request answered; coordinator CPU/req (with --no-spread) is the first node's, and "
            "in brackets its ratio to the hello-world's CPU per request; replica CPU/call (with "
            "--no-spread) is the other nodes' CPU per replica call the first node made to them (reads and "
            "writes, from its /metrics), and in brackets its ratio to the hello-world's CPU per request.",
            _caveat(args),
        ]
    )


def _hot_path_line() -> str:
    if hot_path.planned():
        return "Nodes: the hot path compiled by mypyc (`make compiled`; `KVNODE_PURE=1` runs the pure one)."
    return f"Nodes: the pure hot path ({hot_path.why_pure()})."


# --- the run --------------------------------------------------------------------------------------


def _measure_target(
    wrk: str,
    target: str,
    mode: str,
    urls: Sequence[str],
    server_pids: Sequence[int],
    path: str,
    args: argparse.Namespace,
    scratch: Path,
    token: str = "",
) -> list[Row]:
    rows = []
    if not args.spread:
        load_urls = [urls[0]]
    elif len(urls) == 1:
        load_urls = [urls[0]] * NODES  # hello-world: the same client shape as against the cluster
    else:
        load_urls = list(urls)
    for op in args.ops:
        method = op.upper()
        scripts = []
        for index in range(len(load_urls)):
            script = scratch / f"{target}-{mode}-{op}-{index}.lua"
            script.write_text(lua_script(method, path, args.keys, args.value_size, index + 1, token))
            scripts.append(script)
        progress(f"running {target} {mode} {method} for {args.duration}s")
        # With --no-spread the other nodes only answer the first one's calls: count them (every call a
        # request made, not its own storage's).
        peers = urls[1:] if not args.spread and len(urls) > 1 else None
        before = replica_calls(urls[:1], REQUEST_OPS, peers) if peers else None
        measured = run_wrk(wrk, load_urls, server_pids, scripts, args.connections, args.duration)
        after = replica_calls(urls[:1], REQUEST_OPS, peers) if peers else None
        calls = sum((after - before).values()) if before is not None and after is not None else None
        result = measured.result
        busy = (sum(measured.server_cpu) + measured.wrk_cpu) / measured.elapsed
        progress(
            f"  {result.requests_per_sec:,.0f} req/s, p50 {format_latency(result.p50)}, "
            f"p99 {format_latency(result.p99)}, errors {result.errors}; server CPU "
            f"{'/'.join(f'{cpu:.1f}' for cpu in measured.server_cpu)}s, wrk CPU {measured.wrk_cpu:.1f}s, "
            f"{busy:.2f} of {os.cpu_count()} cores busy with these"
        )
        rows.append(Row(target, mode, op, measured, calls))
    return rows


def run(args: argparse.Namespace) -> str:
    wrk = ensure_wrk()
    progress(_load_line(args))
    rows: list[Row] = []
    conditional: list[ConditionalRow] = []
    conditional_label = ""  # the cluster they ran on
    with tempfile.TemporaryDirectory(prefix="kvnode-bench-") as temp:
        scratch = Path(temp)
        progress("starting the hello-world app")
        with hello_world() as app:
            rows += _measure_target(wrk, "hello-world", "-", app.urls, app.pids, "/", args, scratch)
        for mode in args.modes:
            for guard in args.guards:
                label = mode if guard == "plain" else f"{mode}, {guard}"
                progress(f"starting a {NODES}-node cluster, {label}")
                data_dir = scratch / f"data-{mode}-{guard}"
                with kvnode_cluster(cast(FanoutMode, mode), data_dir, guard) as nodes:
                    config = nodes[0].config
                    fill_cluster(nodes.urls, args.keys, args.value_size, args.connections, config)
                    token = TOKEN if config.auth_tokens_file is not None else ""
                    rows += _measure_target(
                        wrk, "kvnode", label, nodes.urls, nodes.pids, "/v0/entity", args, scratch, token
                    )
                    if args.conditional and not conditional:  # on the first cluster only
                        progress(f"running the conditional-write rows on the {label} cluster")
                        conditional = measure_conditional(
                            wrk,
                            nodes.urls,
                            nodes.pids,
                            args.keys,
                            args.value_size,
                            args.duration,
                            scratch,
                            token,
                        )
                        conditional_label = label
                shutil.rmtree(data_dir, ignore_errors=True)  # free the disk before the next cluster
    text = report(rows, args)
    if conditional:
        text += "\n\n" + conditional_report(conditional, conditional_label, args)
    return text


def conditional_report(rows: Sequence[ConditionalRow], label: str, args: argparse.Namespace) -> str:
    """The conditional-write rows' section of the report (loadtest.bench_conditional)."""
    return "\n".join(
        [
            f"## Conditional writes on the {label} cluster, {args.duration}s per row",
            "",
            "Every request to the first node, each client a wrk process of one connection (-t1 -c1). The "
            "conditional rows' clients write one key each (or one key together), each write over the "
            "version its last answer named (If-Match: its own write's ETag, or a 412's current one), "
            "without reading; applied/s counts the writes that took effect. coordinator CPU/req is the "
            "first node's; round trips/write is its replica calls to each of the other two per request "
            "(op write for the PUT, paxos for conditional writes: prepare, propose and commit make 3 when "
            "uncontended). A conditional row's 412s and 504s are outcomes, not errors.",
            "",
            render_conditional(rows),
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench",
        description="A fresh 3-node kvnode cluster per fan-out mode under wrk, next to an aiohttp "
        "hello-world driven the same way, reported as one Markdown table.",
    )
    parser.add_argument(
        "--duration", type=positive_int, default=10, help="seconds of wrk per row (default: 10)"
    )
    parser.add_argument(
        "--connections", type=positive_int, default=64, help="wrk connections in all (default: 64)"
    )
    parser.add_argument(
        "--modes",
        type=choices(MODES),
        default=list(MODES),
        help=f"fan-out modes (default: {','.join(MODES)})",
    )
    parser.add_argument("--ops", type=choices(OPS), default=list(OPS), help="operations (default: get,put)")
    parser.add_argument(
        "--guards",
        type=choices(GUARDS),
        default=["plain"],
        help=f"the nodes' guards, a cluster each: {','.join(GUARDS)} (default: plain)",
    )
    parser.add_argument(
        "--keys", type=positive_int, default=10_000, help="keys filled and drawn from (default: 10000)"
    )
    parser.add_argument(
        "--value-size", type=non_negative_int, default=100, help="bytes per value (default: 100)"
    )
    parser.add_argument(
        "--spread",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one wrk process per node, so every node coordinates, as clients of a Dynamo-style store "
        "would; --no-spread sends all load to the first node (default: --spread)",
    )
    parser.add_argument(
        "--conditional",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="on the first cluster, the conditional-write rows too: uncontended against a plain PUT, and "
        f"{CONTENDING_CLIENTS} clients on one key against {CONTENDING_CLIENTS} on their own keys (default: "
        "--conditional)",
    )
    parser.add_argument("--out", type=Path, help="also write the report to this Markdown file")
    args = parser.parse_args(argv)
    if args.spread and args.connections < NODES:
        parser.error(f"--spread needs at least {NODES} connections (one wrk process per node)")
    if args.keys > 10**8:
        parser.error("--keys is at most 100000000 (keys are named key-00000000 ...)")
    return args


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through every finally: each process started is stopped by PID


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a background start inherits it ignored
        signal.signal(signum, _interrupted)
    try:
        text = run(args)
    except (BenchError, WrkError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    print(text, flush=True)
    if args.out is not None:
        args.out.write_text(text + "\n")
        progress(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
