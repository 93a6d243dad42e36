"""``python -m kvnode check``: its command line (kvnode.check.runner runs it).

    python -m kvnode check --local --time 300 --nemesis all                  # its own 3-node cluster
    python -m kvnode check --cluster http://10.0.0.1:8080,http://10.0.0.2:8080 --workload set,register \\
        --token-file admin.token --tls-ca ca.pem                              # a running cluster

A bad flag exits 2 with one line, as every kvnode command does.

>>> rerun_command(["--local", "--time", "5"], 42)
'python -m kvnode check --local --time 5 --seed 42'
"""

from __future__ import annotations

import argparse
import random
import shlex
from collections.abc import Sequence
from pathlib import Path

from kvnode.check.nemesis import KINDS
from kvnode.check.runner import Options, run
from kvnode.check.workloads import WORKLOADS
from kvnode.ops.argtypes import choices, http_urls, integer, positive_float, positive_int, token_file
from kvnode.ops.parsing import OneLineParser

__all__ = ["main", "parse", "rerun_command"]

DEFAULT_REPLICATION = 3  # with --local: N = 3, or the node count when fewer


def _parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m kvnode check",
        description="A Jepsen-style check: drive workloads at a cluster while injecting faults, record the "
        "history, check it. Exit 0 valid, 1 invalid, 2 unknown or could not run. See docs/check.md.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--local", action="store_true", help="start a cluster of its own (--nodes) and check it"
    )
    where.add_argument(
        "--cluster", type=http_urls, metavar="URL,...", help="check the running cluster at these nodes"
    )
    parser.add_argument(
        "--workload",
        type=choices(list(WORKLOADS)),
        default=list(WORKLOADS),
        metavar=",".join(WORKLOADS),
        help=f"the workloads (default: {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--nemesis",
        type=_nemesis,
        default=[],
        metavar="KIND,...|all|none",
        help=f"the faults: {','.join(KINDS)}, all, or none (default: none)",
    )
    parser.add_argument(
        "--time", type=positive_float, default=60.0, metavar="S", help="seconds of workload (default: 60)"
    )
    parser.add_argument(
        "--rate", type=positive_float, default=100.0, help="requests a second, all workers (default: 100)"
    )
    parser.add_argument(
        "--keys", type=positive_int, default=5, help="keys of the register and cas workloads (default: 5)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("out/check"), help="where the report goes (default: out/check)"
    )
    parser.add_argument(
        "--seed", type=integer, help="the seed of the operations and faults (default: a random one)"
    )
    parser.add_argument("--nodes", type=positive_int, help="with --local: nodes to start (default: 3)")
    parser.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="N",
        help=f"with --local: the cluster's N (default: {DEFAULT_REPLICATION}, or --nodes when fewer)",
    )
    parser.add_argument(
        "--token-file", dest="token", type=token_file, help="with --cluster: an admin token's file"
    )
    parser.add_argument(
        "--tls-ca", type=Path, metavar="FILE", help="with --cluster: the CA of https:// nodes (PEM)"
    )
    parser.add_argument(
        "--search-budget-s",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="seconds the cas checker may search before answering unknown (default: 60)",
    )
    return parser


def _nemesis(text: str) -> list[str]:
    if text.strip() == "all":
        return list(KINDS)
    if text.strip() == "none":
        return []
    try:
        return choices(KINDS)(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"choose from {','.join(KINDS)}, all or none, got {text!r}"
        ) from None


def rerun_command(argv: Sequence[str], seed: int) -> str:
    """The command line that runs the same check again, with its seed."""
    given = list(argv)
    if "--seed" in given:
        del given[given.index("--seed") : given.index("--seed") + 2]
    given = [arg for arg in given if not arg.startswith("--seed=")]
    return shlex.join(["python", "-m", "kvnode", "check", *given, "--seed", str(seed)])


def parse(argv: Sequence[str]) -> Options:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cluster and (args.nodes is not None or args.replication_factor is not None):
        parser.error("--nodes and --replication-factor go with --local: a running cluster has its own")
    if args.local and (args.token is not None or args.tls_ca is not None):
        parser.error("--token-file and --tls-ca go with --cluster: --local starts its nodes without them")
    nodes = args.nodes or 3
    replication = args.replication_factor or min(DEFAULT_REPLICATION, nodes)
    if replication > nodes:
        parser.error(f"--replication-factor {replication} exceeds the {nodes} nodes")
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    return Options(
        workloads=args.workload,
        nemesis=args.nemesis,
        time_s=args.time,
        rate=args.rate,
        keys=args.keys,
        out=args.out,
        seed=seed,
        command=rerun_command(argv, seed),
        cluster=args.cluster or (),
        nodes=nodes,
        replication_factor=replication,
        token=args.token,
        tls_ca=args.tls_ca,
        search_budget_s=args.search_budget_s,
    )


def main(argv: Sequence[str]) -> int:
    return run(parse(argv))
