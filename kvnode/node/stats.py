"""What an operator sees of a node: ``GET /v0/stats`` (health for people and tools), ``GET /v0/cluster``
(its view of the cluster, which ``python -m kvnode admin`` reads) and ``GET /metrics`` (Prometheus, see
kvnode.node.exporter), all three from one :class:`~kvnode.node.snapshot.NodeSnapshot`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from kvnode.node.parts import PARTS, NodeParts
from kvnode.node.snapshot import NodeSnapshot
from kvnode.replica.peer import PeerReplica
from kvnode.topology.change_steps import Progress, change_under_way
from kvnode.topology.membership import Membership

__all__ = ["add_routes", "cluster_view", "stats_view"]


def add_routes(app: web.Application, parts: NodeParts) -> None:
    app.router.add_get("/v0/stats", get_stats, allow_head=False)
    app.router.add_get("/v0/cluster", get_cluster, allow_head=False)
    app.router.add_get("/metrics", make_aiohttp_handler(parts.metrics.registry), allow_head=False)


async def get_stats(request: web.Request) -> web.Response:
    """``?reset=1`` starts a new loop-lag window after answering (the profiler uses it per run)."""
    parts = request.app[PARTS]
    body = stats_view(parts, parts.snapshot())
    if request.query.get("reset") == "1":
        parts.loop_lag.reset()
    return _json(body)


async def get_cluster(request: web.Request) -> web.Response:
    parts = request.app[PARTS]
    await _probe(parts.peers, parts.config.timeout)
    # A node that left (or whose join was undone) says the membership without it, which it stored.
    membership = parts.members.without_this_node or parts.membership
    view = cluster_view(parts.config.url, membership, parts.snapshot(), parts.own_part.progress)
    # What a restore judges a backed-up version's age by (kvnode.ops.backup): this node's clock now, and
    # how long a tombstone is kept at least.
    view["clock_us"] = parts.clock.current()
    view["gc_grace_s"] = parts.config.gc_grace_s
    return _json(view)


def stats_view(parts: NodeParts, snapshot: NodeSnapshot) -> dict[str, Any]:
    """Node health: the event loop's lag, each peer channel's state, then every part's figures."""
    view: dict[str, Any] = {
        "node": parts.config.url,
        "fanout": parts.config.fanout,
        "cluster": list(parts.coordinator.placement.nodes),
        "loop_lag_ms": {
            "samples": snapshot.loop_lag_samples,
            **snapshot.loop_lag_ms,
            "worst_since_start": round(snapshot.loop_lag_worst_s * 1000, 3),
            "ran_max": round(snapshot.loop_lag_ran_s * 1000, 3),
        },
        "peers": {url: peer.values["state"] for url, peer in snapshot.peers},
        # The replica protocol: the versions this node speaks, and the one each open channel speaks.
        "protocol": {
            "speaks": snapshot.protocols,
            "peers": {url: peer.values["protocol"] for url, peer in snapshot.peers},
        },
    }
    return view | _sections(snapshot)


def cluster_view(
    url: str, membership: Membership, snapshot: NodeSnapshot, own_part: Progress
) -> dict[str, Any]:
    """The node's view of its cluster: the membership (members with their placement tokens, zones and
    datacenters, the replication factor), its claimant
    and the change under way (kvnode.topology.change_steps: its kind, its member, the member that walks
    it), this node's part in the change it walks or walked last (``own_part``: its step and the records
    it streamed, None before any), each member's channel state and figures as this node sees it, the
    state of its data (as the member last said), and /v0/stats's sections on the clocks, tombstone GC,
    this node's rebuild and its hints (by every peer)."""
    change = change_under_way(membership)
    peers = {peer_url: peer.json() for peer_url, peer in snapshot.peers}
    sections = _sections(snapshot)
    rebuild = sections["rebuild"]
    view = []
    for member in membership.urls:
        entry = {
            "url": member,
            "zone": membership.zone_of(member),
            "datacenter": membership.datacenter_of(member),
            "membership_state": membership.state_of(member),
            "self": member not in peers,
        }
        if member in peers:
            state = peers[member]["state"]
            identity = sections["identities"]["peers"].get(member, "")
            entry |= {
                "state": state,
                "reachable": state == "connected",
                **peers[member],
                "identity": identity,
            }
        else:
            entry |= {
                "state": "self",
                "reachable": True,
                "down_for_s": 0.0,
                "node_state": rebuild["state"],
                "identity": rebuild["identity"],
                "protocol": snapshot.protocols,
            }
        view.append(entry)
    return {
        "node": url,
        **membership.described(),
        "claimant": membership.claimant,
        "change": None if change is None else change.to_json(),
        "own_part": own_part.to_json() if own_part.version else None,
        "streamed": sections["membership"]["streamed"],
        "undone": sections["membership"]["undone"],
        "members": view,
        "clock": sections["clock"],
        "gc": sections["gc"],
        "rebuild": rebuild,
        "hints": snapshot.reading("hints").json(snapshot.peer_urls),  # every peer's, 0 included
    }


def _sections(snapshot: NodeSnapshot) -> dict[str, dict[str, Any]]:
    """Every part's figures as JSON, a section each (tables that share one, the clocks', merged)."""
    sections: dict[str, dict[str, Any]] = {}
    for reading in snapshot.readings:
        sections.setdefault(reading.table.section or reading.table.group, {}).update(reading.json())
    return sections


async def _probe(peers: Sequence[PeerReplica], timeout: float) -> None:
    """One connect attempt now to each peer not connected (awaited up to ``timeout``), so an idle channel
    (no traffic since start, or since the peer went away) reports whether the peer answers."""
    for peer in peers:
        peer.probe()
    attempts = [peer.connect_attempt for peer in peers if peer.connect_attempt is not None]
    if attempts:
        await asyncio.wait(attempts, timeout=timeout)


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(text=json.dumps(body, indent=2) + "\n", content_type="application/json")
