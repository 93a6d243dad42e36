"""``python -m kvnode admin``: a node's view of its cluster, for a person (tables) or a script (``--json``).

    python -m kvnode admin --url http://127.0.0.1:8080 status        # each member: reachable? rebuilding?
    python -m kvnode admin --url http://127.0.0.1:8080 ring          # the cluster list, each member's share
    python -m kvnode admin --url http://127.0.0.1:8080 locate user:42  # the key's replicas, in order
    python -m kvnode admin --url http://127.0.0.1:8080 hints --json  # hints waiting, per target
    python -m kvnode admin --url http://127.0.0.1:8080 repair --wait  # anti-entropy with every peer, now
    python -m kvnode admin --url http://127.0.0.1:8080 leave http://127.0.0.1:8082 --wait  # a member leaves
    python -m kvnode admin --url http://127.0.0.1:8080 backup DIR   # and restore DIR: kvnode.ops.backup

``repair`` asks the node for a full anti-entropy repair (``POST /v0/repair``, kvnode.node.operator_api); with
``--wait`` it prints progress on stderr until the repair is done, then a one-line summary, and exits 1
(naming them) when a peer could not be repaired. Everything else comes from the node's
``GET /v0/cluster`` (kvnode.node.stats.cluster_view): the states of its own
replica channels (it tries to connect to a member it is not connected to, so the answer is current), the
state of each member's data (serving, or rebuilding after a lost disk, with this node's progress), the
clock fence's verdict (kvnode.clocks.fence: which member's clock is off, if any), its hints and tombstone
GC's counts (what it dropped, what waits for a repair with which peer). A key's
placement is computed here from that node's cluster list, by the same
:class:`kvnode.topology.placement.Placement` every node uses. A node that cannot be reached, or a bad URL,
exits 2 with one line.

A node started with ``--auth-tokens-file`` needs an admin token (``--token-file``); an https:// node is
verified against ``--tls-ca``:

    python -m kvnode admin --url https://127.0.0.1:8080 --tls-ca ca.pem --token-file admin.token status
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvnode.access.tls import TlsUnusable, verifying_context
from kvnode.ops import backup
from kvnode.ops.argtypes import http_url, token_file
from kvnode.ops.flags import OneLineParser
from kvnode.topology.placement import Placement

__all__ = ["main"]

_POLL_S = 0.5  # how often repair --wait asks for progress
_TIMEOUT_S = 10.0  # the node itself waits up to its replica timeout for connect attempts
_SHARE_SAMPLE = 10_000  # keys placed to estimate each member's share of first replicas


def main(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    args = _parser(os.environ if env is None else env).parse_args(argv)
    try:
        if args.command == "repair":
            return _repair(args)
        if args.command == "leave":
            return _leave(args)
        if args.command in backup.COMMANDS:
            return backup.run(args, _fetch)
        view = _fetch(args.url, args.token, args.tls_ca)
    except (_Unreachable, TlsUnusable) as error:
        print(f"kvnode admin: {error}", file=sys.stderr)
        return 2
    report = _REPORTS[args.command](view, args)
    print(json.dumps(report, indent=2) if args.json else _render(args.command, view, report))
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
        dest="command", required=True, metavar="{status,ring,locate,hints,repair,leave,backup,restore}"
    )
    commands.add_parser("status", parents=[after], help="each member, and whether this node reaches it")
    commands.add_parser(
        "ring", parents=[after], help="the cluster list and each member's share of first replicas"
    )
    locate = commands.add_parser("locate", parents=[after], help="the replicas of a key, in placement order")
    locate.add_argument("key", help="the entity id")
    commands.add_parser("hints", parents=[after], help="hints waiting for delivery, per target")
    repair = commands.add_parser(
        "repair", parents=[after], help="a full anti-entropy repair of the node's keys with every peer, now"
    )
    repair.add_argument("--wait", action="store_true", help="follow it to its end (exit 1 if a peer failed)")
    leave = commands.add_parser(
        "leave",
        parents=[after],
        help="a member leaves: its records go to their next owners, then it is removed",
    )
    leave.add_argument("member", type=http_url, help="the member's URL")
    leave.add_argument("--wait", action="store_true", help="follow it until the member is removed")
    backup.add_commands(commands, after)
    return parser


class _Unreachable(Exception):
    pass


class _Refused(Exception):
    """The node refused the change; the message is its reason."""


def _fetch(
    url: str, token: str | None, tls_ca: Path | None, path: str = "/v0/cluster", method: str = "GET"
) -> dict[str, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    context = None if tls_ca is None else verifying_context(tls_ca)
    try:
        request = urllib.request.Request(url + path, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=context) as reply:
            view: dict[str, Any] = json.loads(reply.read())
    except urllib.error.HTTPError as error:
        if error.code == 409:  # a change refused: the body says why
            raise _Refused(error.read().decode("utf-8", "replace").strip()) from None
        raise _Unreachable(f"{method} {url}{path} answered {error.code} {error.reason}") from None
    except urllib.error.URLError as error:
        raise _Unreachable(f"cannot reach {url}: {error.reason}") from None
    except (OSError, ValueError) as error:  # a timeout, a reset, a body that is not JSON
        raise _Unreachable(f"cannot read {url}{path}: {error}") from None
    return view


def _repair(args: argparse.Namespace) -> int:
    run = _fetch(args.url, args.token, args.tls_ca, "/v0/repair", "POST")
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
        run = _fetch(args.url, args.token, args.tls_ca, "/v0/repair")
    print(json.dumps(run, indent=2) if args.json else run["summary"])
    return 1 if run["unreached"] else 0


def _leave(args: argparse.Namespace) -> int:
    """Ask the node at --url to make the member leave; with --wait, follow it (the member's own view has
    its progress) until the node at --url runs without it."""
    path = "/v0/leave?" + urllib.parse.urlencode({"member": args.member})
    try:
        started = _fetch(args.url, args.token, args.tls_ca, path, "POST")
    except _Refused as refusal:
        print(f"kvnode admin: {args.member} cannot leave: {refusal}", file=sys.stderr)
        return 1
    if not args.wait:
        print(json.dumps(started) if args.json else f"{args.member} is leaving; follow it with --wait")
        return 0
    began, shown, streamed = time.monotonic(), "", 0
    while True:
        view = _fetch(args.url, args.token, args.tls_ca)
        if args.member not in view["cluster"]:
            break
        with contextlib.suppress(_Unreachable):  # the member may be gone already
            streamed = _fetch(args.member, args.token, args.tls_ca)["streamed"]
        line = f"{args.member} leaving: {streamed} records streamed to their next owners"
        if line != shown:
            print(line, file=sys.stderr, flush=True)
            shown = line
        time.sleep(_POLL_S)
    seconds = time.monotonic() - began
    done = {"member": args.member, "membership_version": view["membership_version"], "streamed": streamed}
    print(
        json.dumps(done)
        if args.json
        else f"{args.member} left (membership version {view['membership_version']}, {streamed} records "
        f"streamed, {seconds:.1f} s): it can be stopped"
    )
    return 0


def _progress(run: dict[str, Any]) -> str:
    outcomes = run["outcomes"].values()
    moved = sum(o["sent"] + o["received"] for o in outcomes)
    done, peers = len(run["outcomes"]), len(run["peers"])
    return f"repairing with {run['current'] or '-'}: {done} of {peers} peers done, {moved} records moved"


def _status(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    pending = view["hints"]["pending"]
    members = [{**member, "hints_pending": pending.get(member["url"], 0)} for member in view["members"]]
    return {
        "node": view["node"],
        "membership_version": view["membership_version"],
        "joining": view["joining"],
        "leaving": view["leaving"],
        "streamed": view["streamed"],
        "members": members,
        "clock": view["clock"],
        "gc": view["gc"],
        "rebuild": view["rebuild"],
    }


def _ring(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Each member's share of first replicas; while a member joins or leaves, before the change (the
    present owners) and after it (the next ones)."""
    before = _shares(_placement(view, leave_out=view["joining"]))
    after = _shares(_placement(view, leave_out=view["leaving"]))
    members = []
    for position, url in enumerate(view["cluster"], 1):
        member = {"position": position, "url": url, "first_replica_share": after.get(url, 0.0)}
        if before != after:
            member["share_before"] = before.get(url, 0.0)
        members.append(member)
    return {"node": view["node"], "membership_version": view["membership_version"], "members": members}


def _shares(placement: Placement) -> dict[str, float]:
    firsts = dict.fromkeys(placement.nodes, 0)
    for i in range(_SHARE_SAMPLE):
        firsts[placement.order(b"share-sample-%d" % i)[0]] += 1
    return {url: round(count / _SHARE_SAMPLE, 4) for url, count in firsts.items()}


def _locate(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    members = {member["url"]: member for member in view["members"]}
    order = _placement(view).order(args.key.encode("utf-8"))
    return {
        "node": view["node"],
        "key": args.key,
        "replicas": [
            {"order": rank, "url": url, "self": members[url]["self"], "reachable": members[url]["reachable"]}
            for rank, url in enumerate(order, 1)
        ],
    }


def _placement(view: dict[str, Any], leave_out: Sequence[str] = ()) -> Placement:
    """The placement the node uses: its members (but ``leave_out``), scored by their tokens."""
    kept = [
        (url, token)
        for url, token in zip(view["cluster"], view["tokens"], strict=True)
        if url not in leave_out
    ]
    return Placement([url for url, _ in kept], [token for _, token in kept])


def _hints(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    return {"node": view["node"], **view["hints"]}


_REPORTS = {"status": _status, "ring": _ring, "locate": _locate, "hints": _hints}


def _render(command: str, view: dict[str, Any], report: dict[str, Any]) -> str:
    node = report["node"]
    if command == "status":
        rows = [
            [
                m["url"],
                f"{m['state']}: {m['refusal']}" if m.get("refusal") else m["state"],
                _yes(m["reachable"]),
                _down_for(m),
                "-" if m["self"] else str(m["hints_pending"]),
            ]
            for m in report["members"]
        ]
        title = f"cluster of {len(rows)} as {node} sees it"
        table = _table(["MEMBER", "STATE", "REACHABLE", "DOWN FOR", "HINTS PENDING"], rows)
        data = _data_lines(report["members"], report["rebuild"])
        change = _change_line(report)
        return title + "\n" + table + change + _clock_line(report["clock"]) + _gc_line(report["gc"]) + data
    if command == "ring":
        title = (
            f"cluster list of {node} (placement: rendezvous hashing; share from {_SHARE_SAMPLE} sample keys)"
        )
        members = report["members"]
        if "share_before" not in members[0]:
            rows = [[str(m["position"]), m["url"], f"{m['first_replica_share']:.1%}"] for m in members]
            return title + "\n" + _table(["#", "MEMBER", "FIRST REPLICA OF"], rows)
        rows = [
            [str(m["position"]), m["url"], f"{m['share_before']:.1%}", f"{m['first_replica_share']:.1%}"]
            for m in members
        ]
        return title + "\n" + _table(["#", "MEMBER", "BEFORE THE CHANGE", "AFTER IT"], rows)
    if command == "locate":
        rows = [
            [str(r["order"]), r["url"] + (" (this node)" if r["self"] else ""), _yes(r["reachable"])]
            for r in report["replicas"]
        ]
        title = f"key {report['key']!r}: from=k uses the first k replicas; reachable as {node} sees it"
        return title + "\n" + _table(["#", "REPLICA", "REACHABLE"], rows)
    rows = [
        [url, str(count), str(report["kept"].get(url, 0)), str(report["delivered"].get(url, 0))]
        for url, count in report["pending"].items()
    ]
    dropped = ", ".join(f"{reason} {count}" for reason, count in sorted(report["dropped"].items())) or "none"
    title = f"hints kept by {node} (since it started: kept, delivered; dropped: {dropped})"
    return title + "\n" + _table(["TARGET", "PENDING", "KEPT", "DELIVERED"], rows)


def _change_line(report: dict[str, Any]) -> str:
    """A line under the status table while a member joins or leaves (none otherwise)."""
    moving = [(url, "joining") for url in report["joining"]] + [(url, "leaving") for url in report["leaving"]]
    if not moving:
        return ""
    url, state = moving[0]
    return (
        f"\nmembership version {report['membership_version']}: {url} is {state} "
        f"({report['streamed']} records streamed by this node)"
    )


def _clock_line(clock: dict[str, Any]) -> str:
    """A line under the status table when a member's clock is off (none when all agree)."""
    if clock["fenced"]:
        return f"\nclock: {clock['summary']} (this node refuses to coordinate writes)"
    if clock["far"]:
        return f"\nclock: {clock['summary']}"
    return ""


def _gc_line(gc: dict[str, Any]) -> str:
    """A line under the status table once tombstone GC has something to say (none before): what it
    dropped, and what waits for a repair with whom."""
    if not (gc["tombstones_dropped"] or gc["expired_dropped"] or gc["waiting"]):
        return ""
    line = (
        f"\ngc: {gc['tombstones_dropped']} tombstones and {gc['expired_dropped']} expired values dropped "
        f"since start; {gc['waiting']} past their grace period wait for a repair"
    )
    if gc["waiting_for"]:
        peers = ", ".join(f"{peer} ({count})" for peer, count in gc["waiting_for"].items())
        line += f" with {peers}"
    return line


def _data_lines(members: list[dict[str, Any]], rebuild: dict[str, Any]) -> str:
    """A line under the status table for each member whose data is not whole: this node's with its
    rebuild's progress, a peer's as it last said (none while every member serves)."""
    lines = []
    for member in members:
        state = member["node_state"]
        if state in ("serving", ""):
            continue
        line = f"\ndata: {member['url']} is {state}"
        if member["self"] and state == "rebuilding":
            line += (
                f": {rebuild['peers_done']} of {rebuild['peers']} peers done, "
                f"{rebuild['records_received']} records received"
            )
            waiting = "; ".join(f"{peer}: {why}" for peer, why in rebuild["waiting_for"].items())
            line += f"; waiting for {waiting}" if waiting else ""
        elif member["self"]:
            line += ": a new data dir, until a peer says whether this node was a member"
        lines.append(line)
    return "".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _down_for(member: dict[str, Any]) -> str:
    seconds = member["down_for_s"]
    return f"{seconds:.1f}s" if seconds else "-"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [headers, *rows]
    )
