"""``python -m kvnode admin``: a node's view of its cluster, for a person (tables) or a script (``--json``).

    python -m kvnode admin --url http://127.0.0.1:8080 status        # each member: reachable? rebuilding?
    python -m kvnode admin --url http://127.0.0.1:8080 ring          # each member's share; zones', DCs'
    python -m kvnode admin --url http://127.0.0.1:8080 locate user:42  # its replicas, their Paxos state
    python -m kvnode admin --url http://127.0.0.1:8080 hints --json  # hints waiting, per target
    python -m kvnode admin --url http://127.0.0.1:8080 repair --wait  # anti-entropy with every peer, now
    python -m kvnode admin --url http://127.0.0.1:8080 cleanup --wait  # surplus copies dropped, everywhere
    python -m kvnode admin --url http://127.0.0.1:8080 leave http://127.0.0.1:8082 --wait  # a member leaves
    python -m kvnode admin --url http://127.0.0.1:8080 replication-factor 2 --wait  # N owners a key
    python -m kvnode admin --url http://127.0.0.1:8080 replication-factor dc1:3,dc2:2  # per datacenter
    python -m kvnode admin --url http://127.0.0.1:8080 remove http://127.0.0.1:8083  # a join undone
    python -m kvnode admin --url http://127.0.0.1:8080 backup DIR   # and restore DIR: kvnode.ops.backup

``repair`` asks the node for a full anti-entropy repair (``POST /v0/repair``, kvnode.node.operator_api); with
``--wait`` it prints progress on stderr until the repair is done, then a one-line summary, and exits 1
(naming them) when a peer could not be repaired. ``leave`` and ``replication-factor`` ask the node to start
the change (kvnode.node.operator_api), which answers with the change under way; with ``--wait`` admin
follows it on the one member that walks it, as that answer names it (the member leaving; the claimant,
for a new factor): its ``/v0/cluster`` has its progress, and the version past the change once it ended.
Everything else comes from the node's
``GET /v0/cluster`` (kvnode.node.stats.cluster_view): the states of its own
replica channels (it tries to connect to a member it is not connected to, so the answer is current), the
state of each member's data (serving, or rebuilding after a lost disk, with this node's progress), the
clock fence's verdict (kvnode.clocks.fence: which member's clock is off, if any), its hints and tombstone
GC's counts (what it dropped, what waits for a repair with which peer). A key's placement is computed
(kvnode.ops.admin_reports) from that node's cluster list (with each member's zone and datacenter, the
node's datacenter first), by the same :class:`kvnode.topology.placement.Placement` every node uses;
``ring`` counts each zone's and each datacenter's share of a key's owners; ``locate`` then asks each
owner that takes part in the key's Paxos rounds (the present owners, and while a change moves the key,
those gaining it) for its acceptor state for the key (``GET /v0/paxos``, kvnode.node.operator_api: the
ballot promised, the proposal accepted and not yet committed, the last commit's ballot), an owner that
does not answer shown as unreachable, with why. A node that cannot be reached, or a bad URL, exits 2
with one line.

``cleanup`` asks every member (as the node at ``--url`` lists them) to drop its surplus copies now
(``POST /v0/cleanup``: the versions of keys it no longer owns, once every owner holds them); with
``--wait`` it follows them all as ``repair --wait`` does, prints each member's summary and the totals, and
exits 1 naming the members that could not complete (unreachable, a change under way, an owner that did
not confirm). ``status`` shows each member's surplus copies as its last GC pass counted them (asked of
each member the node reaches).

A node started with ``--auth-tokens-file`` needs an admin token (``--token-file``); an https:// node is
verified against ``--tls-ca``:

    python -m kvnode admin --url https://127.0.0.1:8080 --tls-ca ca.pem --token-file admin.token status
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvnode.access.tls import TlsUnusable
from kvnode.config import ReplicationFactor
from kvnode.ops import backup
from kvnode.ops.admin_render import render
from kvnode.ops.admin_reports import REPORTS
from kvnode.ops.argtypes import http_url, token_file
from kvnode.ops.node_http import Refused, Unreachable, fetch
from kvnode.ops.parsing import OneLineParser

__all__ = ["main"]

_POLL_S = 0.5  # how often --wait asks for progress


def main(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    args = _parser(os.environ if env is None else env).parse_args(argv)
    try:
        if args.command == "repair":
            return _repair(args)
        if args.command == "cleanup":
            return _cleanup(args)
        if args.command == "leave":
            return _leave(args)
        if args.command == "replication-factor":
            return _resize(args)
        if args.command == "remove":
            return _remove(args)
        if args.command in backup.COMMANDS:
            return backup.run(args, fetch)
        view = fetch(args.url, args.token, args.tls_ca)
    except (Unreachable, TlsUnusable) as error:
        print(f"kvnode admin: {error}", file=sys.stderr)
        return 2
    report = REPORTS[args.command](view, args)
    print(json.dumps(report, indent=2) if args.json else render(args.command, view, report))
    return 0


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m kvnode admin", description="A running node's view of its cluster.")
    default_url = env.get("KVNODE_URL", "http://127.0.0.1:8080")
    parser.add_argument(
        "--url",
        type=http_url,
        default=default_url,
        help=f"the node to ask [env KVNODE_URL] (default: {default_url})",
    )
    parser.add_argument(
        "--token-file",
        dest="token",
        type=token_file,
        help="file whose first line is an admin token, for a node started with --auth-tokens-file",
    )
    parser.add_argument(
        "--tls-ca", type=Path, metavar="FILE", help="the CA to verify an https:// node against (PEM)"
    )
    json_help = "print JSON for scripts instead of a table"
    parser.add_argument("--json", action="store_true", help=json_help)
    # --json after the command too; SUPPRESS keeps a subcommand from resetting one given before it.
    after = OneLineParser(add_help=False)
    after.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=json_help)
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{status,ring,locate,hints,repair,cleanup,leave,remove,replication-factor,backup,restore}",
    )
    commands.add_parser("status", parents=[after], help="each member, and whether this node reaches it")
    commands.add_parser(
        "ring", parents=[after], help="the cluster list and each member's share of first replicas"
    )
    locate = commands.add_parser(
        "locate",
        parents=[after],
        help="the replicas of a key, in placement order, and its owners' Paxos state",
    )
    locate.add_argument("key", help="the entity id")
    commands.add_parser("hints", parents=[after], help="hints waiting for delivery, per target")
    repair = commands.add_parser(
        "repair", parents=[after], help="a full anti-entropy repair of the node's keys with every peer, now"
    )
    repair.add_argument("--wait", action="store_true", help="follow it to its end (exit 1 if a peer failed)")
    cleanup = commands.add_parser(
        "cleanup",
        parents=[after],
        help="every member drops now the copies it no longer owns, once their owners hold them (after a "
        "join); admin status shows the surplus copies each member's last GC pass counted",
    )
    cleanup.add_argument(
        "--wait", action="store_true", help="follow it to its end (exit 1 naming the members that could not)"
    )
    leave = commands.add_parser(
        "leave",
        parents=[after],
        help="a member leaves: its records go to their next owners, then it is removed",
    )
    leave.add_argument("member", type=http_url, help="the member's URL")
    leave.add_argument("--wait", action="store_true", help="follow it until the member is removed")
    resize = commands.add_parser(
        "replication-factor",
        parents=[after],
        help="change N, the owners of each key: new copies streamed before they count, surplus dropped",
    )
    resize.add_argument(
        "n",
        metavar="N|DC:N,...",
        help="the new replication factor: N in every datacenter (1 to its members), or each one's",
    )
    resize.add_argument("--wait", action="store_true", help="follow it until N counts")
    remove = commands.add_parser(
        "remove",
        parents=[after],
        help="undo the join of a member that claimed one and will never come (a member leaves instead)",
    )
    remove.add_argument("member", type=http_url, help="the joining member's URL")
    backup.add_commands(commands, after)
    return parser


def _repair(args: argparse.Namespace) -> int:
    run = fetch(args.url, args.token, args.tls_ca, "/v0/repair", "POST")
    if not args.wait:
        print(
            json.dumps(run, indent=2) if args.json else f"repair started on {args.url}; follow it with --wait"
        )
        return 0
    shown = ""
    while not run["done"]:
        line = _progress(run)
        if line != shown:
            print(line, file=sys.stderr, flush=True)
            shown = line
        time.sleep(_POLL_S)
        run = fetch(args.url, args.token, args.tls_ca, "/v0/repair")
    print(json.dumps(run, indent=2) if args.json else run["summary"])
    return 1 if run["unreached"] else 0


def _cleanup(args: argparse.Namespace) -> int:
    """Start a cleanup on every member the node at --url lists; with --wait, follow each to its end."""
    members = fetch(args.url, args.token, args.tls_ca)["cluster"]
    runs: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}  # the members that could not, and why
    for member in members:
        try:
            runs[member] = fetch(member, args.token, args.tls_ca, "/v0/cleanup", "POST")
        except (Refused, Unreachable) as error:
            failed[member] = str(error)
    if args.wait:
        _follow_cleanups(args, runs, failed)
        failed |= {member: run["summary"] for member, run in runs.items() if not run["completed"]}
    if args.json:
        print(json.dumps({"members": runs, "failed": failed}, indent=2))
    elif args.wait:
        dropped = sum(run["dropped"] for run in runs.values())
        size = sum(run["bytes"] for run in runs.values())
        for member, run in runs.items():
            print(f"{member}: {run['summary']}")
        print(
            f"cleanup completed on {len(members) - len(failed)} of {len(members)} members: {dropped} surplus "
            f"copies dropped ({size} bytes)"
        )
    else:
        print(f"cleanup started on {len(runs)} of {len(members)} members; follow it with --wait")
    for member, why in failed.items():
        print(f"kvnode admin: cleanup did not complete on {member}: {why}", file=sys.stderr)
    return 1 if failed else 0


def _follow_cleanups(
    args: argparse.Namespace, runs: dict[str, dict[str, Any]], failed: dict[str, str]
) -> None:
    """Ask each member for its cleanup's progress until every one is done; a member that cannot be asked
    any more (stopped: its cleanup is gone with it) moves from ``runs`` to ``failed``. Progress on stderr."""
    shown = ""
    while not all(run["done"] for run in runs.values()):
        line = (
            f"cleaning up: {sum(run['done'] for run in runs.values())} of {len(runs)} members done, "
            f"{sum(run['scanned'] for run in runs.values())} versions read, "
            f"{sum(run['dropped'] for run in runs.values())} surplus copies dropped"
        )
        if line != shown:
            print(line, file=sys.stderr, flush=True)
            shown = line
        time.sleep(_POLL_S)
        for member in [member for member, run in runs.items() if not run["done"]]:
            try:
                runs[member] = fetch(member, args.token, args.tls_ca, "/v0/cleanup")
            except Unreachable as error:
                failed[member] = str(error)
                del runs[member]


def _leave(args: argparse.Namespace) -> int:
    """Ask the node at --url to make the member leave; with --wait, follow it until the member left."""
    path = "/v0/leave?" + urllib.parse.urlencode({"member": args.member})
    try:
        started = fetch(args.url, args.token, args.tls_ca, path, "POST")
    except Refused as refusal:
        print(f"kvnode admin: {args.member} cannot leave: {refusal}", file=sys.stderr)
        return 1
    if not args.wait:
        print(json.dumps(started) if args.json else f"{args.member} is leaving; follow it with --wait")
        return 0
    line = f"{args.member} leaving: {{}} records streamed to their next owners"
    version, streamed, seconds = _follow(args, started["change"], line)
    done = {"member": args.member, "membership_version": version, "streamed": streamed}
    print(
        json.dumps(done)
        if args.json
        else f"{args.member} left (membership version {version}, {streamed} records streamed, {seconds:.1f} "
        "s): it can be stopped"
    )
    return 0


def _resize(args: argparse.Namespace) -> int:
    """Ask the node at --url to move the cluster to N owners a key; with --wait, follow it until N counts."""
    path = "/v0/replication-factor?" + urllib.parse.urlencode({"n": args.n})
    try:
        started = fetch(args.url, args.token, args.tls_ca, path, "POST")
    except Refused as refusal:
        print(f"kvnode admin: the replication factor cannot be {args.n}: {refusal}", file=sys.stderr)
        return 1
    if not args.wait:
        print(
            json.dumps(started)
            if args.json
            else f"replication factor moving to {args.n}; follow it with --wait"
        )
        return 0
    line = f"replication factor moving to {args.n}: {{}} records streamed"
    version, streamed, seconds = _follow(args, started["change"], line)
    factor = ReplicationFactor.parse(args.n).to_json()  # the node took it
    print(
        json.dumps({"replication_factor": factor, "membership_version": version, "streamed": streamed})
        if args.json
        else f"replication factor {args.n} (membership version {version}, {streamed} records streamed, "
        f"{seconds:.1f} s)"
    )
    return 0


def _follow(args: argparse.Namespace, change: dict[str, Any], line: str) -> tuple[int, int, float]:
    """Follow ``change`` (as a node says it: kvnode.topology.change_steps.Change) to its end, asking the
    one member that walks it: its ``/v0/cluster`` says its part (the records it streamed) and, once the
    change ended, the version past it. ``line``, its ``{}`` the records streamed, goes to stderr as they
    change. Returns the version that ended it, the records streamed, and the seconds it took."""
    began, shown, streamed = time.monotonic(), "", 0
    walker = change["walker"]
    while True:
        try:
            view = fetch(walker, args.token, args.tls_ca)
        except Unreachable:  # killed mid-change: it goes on once started again
            progress = f"{walker} does not answer; the change goes on once it is started again"
        else:
            part = view["own_part"]
            if part is not None and part["version"] == change["version"]:
                streamed = part["streamed"]
            if view["membership_version"] > change["version"]:
                return view["membership_version"], streamed, time.monotonic() - began
            progress = line.format(streamed)
        if progress != shown:
            print(progress, file=sys.stderr, flush=True)
            shown = progress
        time.sleep(_POLL_S)


def _remove(args: argparse.Namespace) -> int:
    """Ask the node at --url to undo the member's join; done when it answers (no data moves)."""
    path = "/v0/remove?" + urllib.parse.urlencode({"member": args.member})
    try:
        undone = fetch(args.url, args.token, args.tls_ca, path, "POST")
    except Refused as refusal:
        print(f"kvnode admin: {args.member} cannot be removed: {refusal}", file=sys.stderr)
        return 1
    print(
        json.dumps(undone)
        if args.json
        else f"join of {args.member} undone (membership version {undone['membership_version']}): the "
        f"members are {','.join(undone['cluster'])} again"
    )
    return 0


def _progress(run: dict[str, Any]) -> str:
    outcomes = run["outcomes"].values()
    moved = sum(o["sent"] + o["received"] for o in outcomes)
    done, peers = len(run["outcomes"]), len(run["peers"])
    return f"repairing with {run['current'] or '-'}: {done} of {peers} peers done, {moved} records moved"
