"""What ``kvnode admin``'s read-only commands report (kvnode.ops.admin): each made of a node's view of
its cluster (``GET /v0/cluster``) and the command's arguments, asking other members only where the view
does not say it (their surplus copies, a key's Paxos state). ``status``: each member, its hints and
surplus; ``ring``: each member's share of first replicas, each zone's and datacenter's of the owners;
``locate``: a key's replicas in placement order, with the Paxos state of those in its rounds; ``hints``.
A key's placement is computed here from that view, by the same
:class:`kvnode.topology.placement.Placement` every node uses."""

from __future__ import annotations

import argparse
import concurrent.futures
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from kvnode.ops.admin_render import SHARE_SAMPLE
from kvnode.ops.node_http import Refused, Unreachable, fetch
from kvnode.topology.membership import Membership
from kvnode.topology.placement import Placement

__all__ = ["REPORTS", "hints", "locate", "ring", "status"]


def status(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The node's view of each member, with its hints waiting here and its surplus copies."""
    pending = view["hints"]["pending"]
    surplus = _surplus(view, args)
    members = [
        {**member, "hints_pending": pending.get(member["url"], 0), "surplus": surplus[member["url"]]}
        for member in view["members"]
    ]
    return {
        "node": view["node"],
        "membership_version": view["membership_version"],
        "replication_factor": view["replication_factor"],
        "next_replication_factor": view["next_replication_factor"],
        "joining": view["joining"],
        "leaving": view["leaving"],
        "streamed": view["streamed"],
        "undone": view["undone"],
        "members": members,
        "clock": view["clock"],
        "gc": view["gc"],
        "rebuild": view["rebuild"],
    }


def _surplus(view: dict[str, Any], args: argparse.Namespace) -> dict[str, int | None]:
    """Each member's surplus copies, as its last GC pass counted them: this node's from its view, each
    other's asked of it, at once (None for a member the node does not reach, or that cannot be asked)."""

    def counted(member: dict[str, Any]) -> int | None:
        gc = view["gc"]
        if not member["self"]:
            if not member["reachable"]:
                return None
            try:
                gc = fetch(member["url"], args.token, args.tls_ca, "/v0/stats")["gc"]
            except (Refused, Unreachable):
                return None
        surplus = gc.get("surplus")  # None from a node older than the figure
        return None if surplus is None else int(surplus)

    members = view["members"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        return dict(zip((member["url"] for member in members), pool.map(counted, members), strict=True))


def ring(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Each member's share of first replicas (in its datacenter); while a member joins or leaves, before
    the change (the present owners) and after it (the next ones). Each datacenter's and each zone's share
    of the owners of a key (after the change), with their members."""
    before = _shares(_placement(view, leave_out=view["joining"]))
    placement = _placement(view, leave_out=view["leaving"])
    after = _shares(placement)
    members = []
    for position, url in enumerate(view["cluster"], 1):
        member = {"position": position, "url": url, "first_replica_share": after.get(url, 0.0)}
        if before != after:
            member["share_before"] = before.get(url, 0.0)
        members.append(member)
    zones, datacenters = _owner_shares(placement)
    return {
        "node": view["node"],
        "membership_version": view["membership_version"],
        "members": members,
        "datacenters": datacenters,
        "zones": zones,
    }


def _owner_shares(placement: Placement) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each zone's and each datacenter's members and share of the owners of the sample keys (a share of
    owners is the share of a key's copies it holds): zones, then datacenters."""
    places = [(placement.datacenter_of(url), placement.zone_of(url)) for url in placement.nodes]
    copies = dict.fromkeys(places, 0)
    for i in range(SHARE_SAMPLE):
        for url in placement.owners(b"share-sample-%d" % i):
            copies[placement.datacenter_of(url), placement.zone_of(url)] += 1
    held = SHARE_SAMPLE * placement.replication
    zones = [
        {
            "datacenter": dc,
            "zone": zone,
            "members": places.count((dc, zone)),
            "owner_share": round(n / held, 4),
        }
        for (dc, zone), n in sorted(copies.items())
    ]
    owners = dict(placement.owners_by_datacenter)
    datacenters = [
        {
            "datacenter": dc,
            "members": sum(1 for place in places if place[0] == dc),
            "owners_per_key": owners[dc],
            "owner_share": round(sum(n for (at, _), n in copies.items() if at == dc) / held, 4),
        }
        for dc in sorted(owners)
    ]
    return zones, datacenters


def _shares(placement: Placement) -> dict[str, float]:
    """Each member's share of first replicas in its datacenter (of every key, in one datacenter)."""
    firsts = dict.fromkeys(placement.nodes, 0)
    for i in range(SHARE_SAMPLE):
        seen: set[str] = set()
        for url in placement.order(b"share-sample-%d" % i):
            datacenter = placement.datacenter_of(url)
            if datacenter not in seen:
                seen.add(datacenter)
                firsts[url] += 1
    return {url: round(count / SHARE_SAMPLE, 4) for url, count in firsts.items()}


def locate(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The key's replicas in placement order; each that takes part in its Paxos rounds with its acceptor
    state as it says it (None for the others)."""
    members = {member["url"]: member for member in view["members"]}
    key = args.key.encode("utf-8")
    placement = _placement(view)
    rounds = _round_owners(view, key)
    return {
        "node": view["node"],
        "key": args.key,
        "replication_factor": view["replication_factor"],
        "replicas": [
            {
                "order": rank,
                "url": url,
                "owner": rank <= placement.replication,
                "self": members[url]["self"],
                "reachable": members[url]["reachable"],
                "paxos": _paxos_state(url, args) if url in rounds else None,
            }
            for rank, url in enumerate(placement.order(key), 1)
        ],
    }


def _round_owners(view: dict[str, Any], key: bytes) -> list[str]:
    """The owners a Paxos round on ``key`` asks, as kvnode.paxos.rounds counts them: its present owners
    (read placement: every member but one joining) and, while a change moves it, those gaining it (every
    member but one leaving, under the larger of the two replication factors)."""
    reads = _placement(view, leave_out=view["joining"])
    writes = _placement(view, leave_out=view["leaving"], coming=True)
    current = reads.replicas_for(key, reads.replication)
    gaining = writes.replicas_for(key, writes.replication)
    return [*current, *(url for url in gaining if url not in current)]


def _paxos_state(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The member's acceptor state for the key (``answered``), or why it could not be had."""
    path = "/v0/paxos?" + urllib.parse.urlencode({"id": args.key})
    try:
        state = fetch(url, args.token, args.tls_ca, path, member=True)
    except (Unreachable, Refused) as error:
        return {"answered": False, "error": str(error)}
    return {"answered": True, **{name: state[name] for name in ("promised", "accepted", "committed")}}


def _placement(view: dict[str, Any], leave_out: Sequence[str] = (), coming: bool = False) -> Placement:
    """The placement the node uses: its members (but ``leave_out``), scored by their tokens, in their zones
    and datacenters (the node's first), with its replication factor; with ``coming``, the larger of it
    and the one it moves to, in each datacenter."""
    membership = Membership.from_described(view)
    return membership.placement_without(leave_out, membership.home_of(view["node"]), coming=coming)


def hints(view: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The hints this node keeps for each target."""
    return {"node": view["node"], **view["hints"]}


# Each read-only command's report, by name: made of the view and the command's arguments.
REPORTS: dict[str, Callable[[dict[str, Any], argparse.Namespace], dict[str, Any]]] = {
    "status": status,
    "ring": ring,
    "locate": locate,
    "hints": hints,
}
