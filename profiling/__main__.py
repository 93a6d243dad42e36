"""``python -m profiling record|compare|report|counts``: profile kvnode under load (see profiling/__init__).

Exit status: 0 done, 1 a cluster or load failed, 2 bad usage or missing tools/rights (py-spy, ptrace,
the load-testing pipeline, the load and profile extras: one line naming the command that installs them),
130 interrupted. Progress goes to stderr. The modules that need the extras (memray, matplotlib) are
imported once they are known to be there.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from kvnode import hot_path
from kvnode.config import FanoutMode
from kvnode.ops.argtypes import non_negative_int, positive_float, positive_int
from kvnode.ops.extras import needs
from loadtest.wrk import WrkError, ensure_wrk
from profiling import pyspy
from profiling.children import Children
from profiling.cluster import SCENARIOS, ClusterError, Scenario
from profiling.load import LoadError, Op

if TYPE_CHECKING:
    from profiling.record import RunSpec

__all__ = ["main"]

# Full runs: a rate both modes sustain in both scenarios on 2 shared cores, and phases long enough for
# over 1,000 samples in Python code per run at 500 Hz (profiling.pyspy); at saturation (healthy PUT and
# GET runs only) a busy coordinator gives that in a few seconds, and 15 s holds several thousand; 12 runs
# in about 12 minutes. --quick: every step, in seconds (a smoke check: too few samples to compare anything).
_FULL = {"rate": 400, "duration": 30.0, "memray_duration": 8.0, "keys": 2000, "saturation_duration": 15}
_QUICK = {"rate": 100, "duration": 3.0, "memray_duration": 2.0, "keys": 300, "saturation_duration": 2}
# The saturation phase's closed loop: as make bench loads its coordinator (wrk -t1 -c64).
_CONNECTIONS = 64
# The saturation phase is the healthy cluster's: where throughput is decided.
_SATURATED: tuple[str, ...] = ("healthy",)
# counts: enough requests that the warm-up and the idle heartbeat are under 1 % of what is counted.
_COUNTS = {"requests": 5000, "connections": 64}
_VALUE_SIZE = 256
_OPS: tuple[Op, ...] = ("put", "get", "cas")
# counts sends one kind of request in a closed loop; a cas op is two, the second made of the first's answer.
_COUNTED_OPS: tuple[Op, ...] = ("put", "get")
_MODES: tuple[FanoutMode, ...] = ("async", "sync")
# A run's time beside its loads: two cluster starts and stops, reading the memray capture; and beside
# the saturation phase's load, drawing its flamegraph.
_RUN_OVERHEAD_S = 35.0
_SATURATION_OVERHEAD_S = 3.0
_FILL_S = 5.0


def _progress(message: str) -> None:
    print(f"profiling [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m profiling",
        description="Profile kvnode under constant-rate load: py-spy CPU, waits, GIL and dumps, memray "
        "allocations, event-loop lag; and at saturation (a closed loop from wrk): py-spy CPU and the replica "
        "channel's batching.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help="one mode and operation: every profile kind into --out")
    record.add_argument("--mode", choices=("async", "sync"), required=True, help="the nodes' fan-out")
    record.add_argument("--op", choices=_OPS, required=True)
    record.add_argument("--scenario", choices=SCENARIOS, default="healthy", help="slow-replica: n3 is slow")
    compare = commands.add_parser(
        "compare", help="sync and async x PUT, GET and CAS x healthy and slow-replica, and report.md"
    )
    compare.add_argument("--quick", action="store_true", help="short phases: a smoke check in seconds a run")
    compare.add_argument(
        "--scenarios", type=_choices(SCENARIOS), default=SCENARIOS, help="comma-separated (default: both)"
    )
    compare.add_argument("--ops", type=_choices(_OPS), default=_OPS, help="comma-separated (default: all)")
    report = commands.add_parser("report", help="rewrite DIR/report.md from the runs already in DIR")
    report.add_argument("--out", type=Path, required=True, help="a directory written by record or compare")
    counts = commands.add_parser(
        "counts", help="allocations, system calls and replica frames per request at the coordinator"
    )
    counts.add_argument("--out", type=Path, required=True, help="directory for counts.md, logs and captures")
    counts.add_argument(
        "--ops", type=_choices(_COUNTED_OPS), default=_COUNTED_OPS, help="comma-separated (default: both)"
    )
    counts.add_argument("--mode", choices=_MODES, default="async", help="the nodes' fan-out (default async)")
    counts.add_argument(
        "--requests",
        type=positive_int,
        default=_COUNTS["requests"],
        help="requests a phase (default %(default)s)",
    )
    counts.add_argument(
        "--connections",
        type=positive_int,
        default=_COUNTS["connections"],
        help="closed-loop connections (default %(default)s: at saturation, as make bench loads)",
    )
    counts.add_argument(
        "--keys", type=positive_int, default=_FULL["keys"], help="key space (default %(default)s)"
    )
    counts.add_argument("--value-size", type=positive_int, default=_VALUE_SIZE, help="bytes per value")
    for command in (record, compare):
        command.add_argument("--out", type=Path, required=True, help="directory for the profiles and report")
        command.add_argument(
            "--rate", type=positive_int, help=f"requests per second (default {_FULL['rate']})"
        )
        command.add_argument(
            "--duration",
            type=positive_float,
            help=f"seconds of load per phase (default {_FULL['duration']:g})",
        )
        command.add_argument(
            "--memray-duration",
            type=positive_float,
            help=f"seconds of load under memray (default {_FULL['memray_duration']:g})",
        )
        command.add_argument(
            "--sample-rate",
            type=positive_int,
            default=pyspy.SAMPLE_RATE,
            help=f"py-spy samples a second (default {pyspy.SAMPLE_RATE})",
        )
        command.add_argument(
            "--saturation-duration",
            type=non_negative_int,
            help=f"seconds of the closed loop at saturation, healthy runs only; 0: none "
            f"(default {_FULL['saturation_duration']})",
        )
        command.add_argument(
            "--connections",
            type=positive_int,
            default=_CONNECTIONS,
            help="the closed loop's connections (default %(default)s, as make bench loads)",
        )
        command.add_argument("--keys", type=positive_int, help=f"key space (default {_FULL['keys']})")
        command.add_argument("--value-size", type=positive_int, default=_VALUE_SIZE, help="bytes per value")
        command.add_argument("--all-nodes", action="store_true", help="profile every node, not only n1")
        command.add_argument("--py-spy", help="the py-spy executable (default: the virtualenv's, then PATH)")
    return parser


def _choices(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(item.strip() for item in text.split(",") if item.strip())
        if not chosen or set(chosen) - set(allowed):
            raise argparse.ArgumentTypeError(f"comma-separated, of {', '.join(allowed)}; got {text!r}")
        return chosen

    return parse


def _specs(args: argparse.Namespace) -> list[RunSpec]:
    from profiling.record import RunSpec

    defaults = _QUICK if getattr(args, "quick", False) else _FULL
    common = {
        "rate": int(args.rate or defaults["rate"]),
        "duration": float(args.duration or defaults["duration"]),
        "memray_duration": float(args.memray_duration or defaults["memray_duration"]),
        "keys": int(args.keys or defaults["keys"]),
        "value_size": args.value_size,
        "sample_rate": args.sample_rate,
        "all_nodes": args.all_nodes,
        "connections": args.connections,
    }
    saturation = (
        defaults["saturation_duration"] if args.saturation_duration is None else args.saturation_duration
    )

    def spec(mode: FanoutMode, op: Op, scenario: Scenario) -> RunSpec:
        # wrk's closed loop sends one kind of request: a cas op's write is made of its read's answer.
        seconds = int(saturation) if scenario in _SATURATED and op != "cas" else 0
        return RunSpec(mode, op, scenario=scenario, saturation_duration=seconds, **common)

    if args.command == "record":
        return [spec(args.mode, args.op, args.scenario)]
    return [spec(mode, op, scenario) for scenario in args.scenarios for op in args.ops for mode in _MODES]


def _planned_s(spec: RunSpec) -> float:
    fill = _FILL_S if spec.op == "get" else 0.0
    saturation = spec.saturation_duration + _SATURATION_OVERHEAD_S if spec.saturation_duration else 0.0
    return _RUN_OVERHEAD_S + fill + spec.duration + saturation + spec.memray_duration


def _rewrite_report(out: Path) -> int:
    """Rebuild report.md from the run.json files under ``out``, keeping the command that made them."""
    from profiling.report import write_report

    run_dirs = sorted({path.parent for path in [*out.glob("run.json"), *out.glob("*/run.json")]})
    if not run_dirs:
        print(f"profiling: no run.json in {out} or its subdirectories", file=sys.stderr)
        return 2
    previous = out / "report.md"
    found = re.search(r"by `([^`]+)`", previous.read_text()) if previous.exists() else None
    report = write_report(
        out, run_dirs, found.group(1) if found else f"python -m profiling report --out {out}"
    )
    _progress(f"done: {report}")
    return 0


def _counts(args: argparse.Namespace, command: str, children: Children) -> int:
    """Each operation's counts per request, printed and written to OUT/counts.md."""
    from profiling.counts import CountSpec, count_run, find_perf, format_counts

    specs = [
        CountSpec(op, args.requests, args.connections, args.keys, args.value_size, args.mode)
        for op in args.ops
    ]
    runs = [count_run(spec, args.out / spec.op, children, _progress, find_perf()) for spec in specs]
    table = format_counts(runs, specs[0], command)
    (args.out / "counts.md").write_text(table + "\n")
    print(table)
    return 0


def _profile(args: argparse.Namespace, command: str, py_spy: str, children: Children) -> int:
    """Record every run the command asks for, and write report.md."""
    from profiling.record import record_run
    from profiling.report import kept_files, write_report

    try:
        pyspy.check_ptrace(py_spy, children)
    except pyspy.PtraceDenied as error:
        print(f"profiling: {error}\n{pyspy.ptrace_advice()}", file=sys.stderr)
        return 2
    specs = _specs(args)
    try:
        wrk = ensure_wrk() if any(spec.saturation_duration for spec in specs) else None
    except WrkError as error:
        print(
            f"profiling: the saturation phase runs wrk: {error} (or --saturation-duration 0)", file=sys.stderr
        )
        return 2
    run_dirs = []
    for index, spec in enumerate(specs):
        left = sum(_planned_s(later) for later in specs[index:]) / 60
        _progress(f"run {index + 1} of {len(specs)}: {spec.name} (about {left:.0f} min left)")
        run_dir = args.out if args.command == "record" else args.out / spec.name
        record_run(spec, run_dir, py_spy, children, _progress, wrk)
        run_dirs.append(run_dir)
    report = write_report(args.out, run_dirs, command)
    kept = kept_files(args.out)
    size = sum(path.stat().st_size for path in kept) / 1e6
    _progress(
        f"done: {report}; without the raw files (.gitignore) the set is {len(kept)} files, {size:.1f} MB"
    )
    return 0


def _with_children(work: Callable[[Children], int]) -> int:
    """``work``'s exit status, every process it started stopped after it: 1 for a cluster or a load that
    failed, 130 on Ctrl-C or SIGTERM."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a background start inherits it ignored
        signal.signal(signum, _interrupt)
    children = Children()
    try:
        return work(children)
    except (ClusterError, LoadError) as error:
        print(f"profiling: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _progress(f"interrupted: stopping {len(children.processes)} process(es) started")
        return 130
    finally:
        children.stop_all()


def _interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = shlex.join(["python", "-m", "profiling", *(sys.argv[1:] if argv is None else argv)])
    # A report draws its plots (the load extra); a run also reads memray's captures (the profile extra).
    extras = ["load"] if args.command == "report" else ["load", "profile"]
    refusal = needs(f"python -m profiling {args.command}", extras)
    if refusal:
        print(f"profiling: {refusal}", file=sys.stderr)
        return 2
    if args.command == "report":
        return _rewrite_report(args.out)
    # The profiles name kvnode's functions: its nodes run the pure modules, even where a compiled hot path
    # is built (kvnode.hot_path), whose every compiled function py-spy and memray would see as native code.
    os.environ[hot_path.PURE_ENV] = "1"
    if args.command == "counts":
        return _with_children(partial(_counts, args, command))
    py_spy = args.py_spy or pyspy.find_py_spy()
    if py_spy is None:
        print("profiling: py-spy not found; install it with: pip install -e '.[profile]'", file=sys.stderr)
        return 2
    return _with_children(partial(_profile, args, command, py_spy))


if __name__ == "__main__":
    sys.exit(main())
