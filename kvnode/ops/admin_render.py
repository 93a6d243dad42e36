"""How ``python -m kvnode admin`` shows a report to a person: a table per command (locate's with its owners'
Paxos state in a second one), and a line under the status table for what needs saying (a change under
way, a clock off, GC waiting, surplus copies, data not whole). The
hints table has a column for each of the hint store's figures by target, as their table describes them
(kvnode.figures); the lines are sentences, each worded for the figures it speaks of."""

from __future__ import annotations

from typing import Any

from kvnode.config import DEFAULT_DATACENTER, ReplicationFactor
from kvnode.figures import Kind
from kvnode.replica.hints import HINT_FIGURES
from kvnode.topology.placement import host_of

__all__ = ["SHARE_SAMPLE", "render"]

SHARE_SAMPLE = 10_000  # keys placed to estimate each member's share of first replicas


def render(command: str, view: dict[str, Any], report: dict[str, Any]) -> str:
    node = report["node"]
    if command == "status":
        rows = [
            [
                m["url"],
                f"{m['state']}: {m['refusal']}" if m.get("refusal") else m["state"],
                _yes(m["reachable"]),
                _down_for(m),
                "-" if m["self"] else str(m["hints_pending"]),
                str(m.get("protocol") or "-"),
                "-" if m["surplus"] is None else str(m["surplus"]),
            ]
            for m in report["members"]
        ]
        title = f"cluster of {len(rows)} as {node} sees it; each key on {_on(report)} of them"
        headers = ["MEMBER", "STATE", "REACHABLE", "DOWN FOR", "HINTS PENDING", "PROTOCOL", "SURPLUS"]
        if _placed(report["members"]):  # zones or datacenters given: where each member is
            headers += ["ZONE", "DATACENTER"]
            rows = [
                [*row, m["zone"], m["datacenter"]] for row, m in zip(rows, report["members"], strict=True)
            ]
        table = _table(headers, rows)
        data = _data_lines(report["members"], report["rebuild"])
        change = _change_line(report) + (f"\n{report['undone']}" if report["undone"] else "")
        gc = _gc_line(report["gc"]) + _surplus_line(report["members"])
        return title + "\n" + table + change + _clock_line(report["clock"]) + gc + data
    if command == "ring":
        title = (
            f"cluster list of {node} (placement: rendezvous hashing; share from {SHARE_SAMPLE} sample keys)"
        )
        members = report["members"]
        if "share_before" not in members[0]:
            rows = [[str(m["position"]), m["url"], f"{m['first_replica_share']:.1%}"] for m in members]
            return title + "\n" + _table(["#", "MEMBER", "FIRST REPLICA OF"], rows) + _places(report)
        rows = [
            [str(m["position"]), m["url"], f"{m['share_before']:.1%}", f"{m['first_replica_share']:.1%}"]
            for m in members
        ]
        return title + "\n" + _table(["#", "MEMBER", "BEFORE THE CHANGE", "AFTER IT"], rows) + _places(report)
    if command == "locate":
        rows = [
            [
                str(r["order"]),
                r["url"] + (" (this node)" if r["self"] else ""),
                _yes(r["owner"]),
                _yes(r["reachable"]),
            ]
            for r in report["replicas"]
        ]
        owners = sum(1 for r in report["replicas"] if r["owner"])
        factor = report["replication_factor"]
        first = f"N={factor}" if factor == owners else f"{owners} (N={_factor(factor)})"
        title = (
            f"key {report['key']!r}: owned by the first {first}, from=k uses the first k; reachable as "
            f"{node} sees it"
        )
        return title + "\n" + _table(["#", "MEMBER", "OWNER", "REACHABLE"], rows) + _paxos(report)
    return _hints(node, report)


def _factor(given: int | dict[str, int]) -> str:
    """A replication factor as the flag says it: ``3``, or ``dc1:3,dc2:2``."""
    return str(ReplicationFactor.from_json(given))


def _on(report: dict[str, Any]) -> str:
    """How many members hold each key, as the status title says it: ``N=3``, or ``N=3 in each
    datacenter``, or each datacenter's (``N=east:3,west:2 (each datacenter's)``)."""
    n = report["replication_factor"]
    if not isinstance(n, int):
        return f"N={_factor(n)} (each datacenter's)"
    datacenters = {m.get("datacenter", DEFAULT_DATACENTER) for m in report["members"]}
    return f"N={n} in each datacenter" if len(datacenters) > 1 else f"N={n}"


def _placed(members: list[dict[str, Any]]) -> bool:
    """Whether the members were given zones or datacenters: a zone not the member's host, a datacenter
    not the default (a node older than zones says neither)."""
    return any(
        m.get("zone", host_of(m["url"])) != host_of(m["url"])
        or m.get("datacenter", DEFAULT_DATACENTER) != DEFAULT_DATACENTER
        for m in members
    )


def _places(report: dict[str, Any]) -> str:
    """Tables under the ring's of each datacenter's and each zone's share of the owners of a key, when
    there is more than one of either (none from a node older than zones)."""
    zones, datacenters = report.get("zones", []), report.get("datacenters", [])
    if len(zones) < 2 and len(datacenters) < 2:
        return ""
    dc_rows = [
        [d["datacenter"], str(d["members"]), str(d["owners_per_key"]), f"{d['owner_share']:.1%}"]
        for d in datacenters
    ]
    zone_rows = [[z["datacenter"], z["zone"], str(z["members"]), f"{z['owner_share']:.1%}"] for z in zones]
    return (
        "\n\neach datacenter's share of the copies of a key (N: the owners each key has there)\n"
        + _table(["DATACENTER", "MEMBERS", "N", "COPIES"], dc_rows)
        + "\n\neach zone's share of the copies of a key\n"
        + _table(["DATACENTER", "ZONE", "MEMBERS", "COPIES"], zone_rows)
    )


def _paxos(report: dict[str, Any]) -> str:
    """A table under locate's of each owner's Paxos acceptor state for the key, as it said it: the ballot
    it promised, the proposal it accepted and no commit has voided (its ballot, put or delete, the ETag
    of the version proposed), the ballot of its last commit; a line for each owner that did not answer."""
    owners = [(r["url"], r["paxos"]) for r in report["replicas"] if r["paxos"] is not None]
    rows = [
        [url, state.get("promised") or "-", _accepted(state.get("accepted")), state.get("committed") or "-"]
        if state["answered"]
        else [url, "unreachable", "-", "-"]
        for url, state in owners
    ]
    title = "\nPaxos state of the key on the owners its rounds ask (ballots are microseconds.node)"
    table = _table(["OWNER", "PROMISED", "ACCEPTED, NOT COMMITTED", "LAST COMMIT"], rows)
    unreached = "".join(f"\n{url}: {state['error']}" for url, state in owners if not state["answered"])
    return title + "\n" + table + unreached


def _accepted(accepted: dict[str, Any] | None) -> str:
    if accepted is None:
        return "-"
    return f'{accepted["ballot"]} {"delete" if accepted["delete"] else "put"} "{accepted["etag"]}"'


def _hints(node: str, report: dict[str, Any]) -> str:
    """A column for each of the hint store's figures by target (kvnode.replica.hints.HINT_FIGURES), a row
    for each target; its other figures (by reason) in the title."""
    columns = [row for row in HINT_FIGURES.rows if row.every_peer]
    keys = [row.json_key for row in columns]
    rows = [[url, *(str(report[key].get(url, 0)) for key in keys)] for url in report[keys[0]]]
    counters = ", ".join(row.json_key for row in columns if row.kind is Kind.COUNTER)
    others = "".join(
        f"; {row.json_key}: {_counts(report[row.json_key])}"
        for row in HINT_FIGURES.rows
        if not row.every_peer
    )
    title = f"hints kept by {node} (since it started: {counters}{others})"
    return title + "\n" + _table(["TARGET", *(key.upper() for key in keys)], rows)


def _counts(counts: dict[str, int]) -> str:
    """``a 1, b 2``, by name; ``none`` when there are none."""
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "none"


def _change_line(report: dict[str, Any]) -> str:
    """A line under the status table while a member joins or leaves, or the replication factor changes
    (none otherwise)."""
    moving = [(url, "joining") for url in report["joining"]] + [(url, "leaving") for url in report["leaving"]]
    if report["next_replication_factor"]:
        return (
            f"\nmembership version {report['membership_version']}: the replication factor moves from "
            f"{_factor(report['replication_factor'])} to {_factor(report['next_replication_factor'])} "
            f"({report['streamed']} records streamed by this node)"
        )
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


def _surplus_line(members: list[dict[str, Any]]) -> str:
    """A line under the status table while a member holds surplus copies (none otherwise)."""
    surplus = sum(m["surplus"] or 0 for m in members)
    if not surplus:
        return ""
    holders = sum(1 for m in members if m["surplus"])
    return (
        f"\nsurplus: {surplus} copies of keys their holder no longer owns, on {holders} of {len(members)} "
        "members (as each one's last GC pass counted them): admin cleanup drops them now"
    )


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
