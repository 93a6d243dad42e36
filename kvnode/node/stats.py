"""What an operator sees of a node: ``GET /v0/stats`` (health for people and tools), ``GET /v0/cluster``
(its view of the cluster, which ``python -m kvnode admin`` reads) and ``GET /metrics`` (Prometheus, see
kvnode.node.exporter), all three from one :class:`~kvnode.node.snapshot.NodeSnapshot`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from kvnode.node.parts import PARTS, NodeParts
from kvnode.node.snapshot import ClockFigures, NodeSnapshot, RebuildFigures, RepairFigures
from kvnode.replica.peer import PeerReplica
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
    view = cluster_view(parts.config.url, parts.membership, parts.snapshot())
    # What a restore judges a backed-up version's age by (kvnode.ops.backup): this node's clock now, and
    # how long a tombstone is kept at least.
    view["clock_us"] = parts.clock.current()
    view["gc_grace_s"] = parts.config.gc_grace_s
    return _json(view)


def stats_view(parts: NodeParts, snapshot: NodeSnapshot) -> dict[str, Any]:
    """Node health: the event loop's lag, each peer channel's state, hints, load and the coordinator's
    counters."""
    hints = snapshot.hints
    return {
        "node": parts.config.url,
        "fanout": parts.config.fanout,
        "cluster": list(parts.coordinator.placement.nodes),
        "loop_lag_ms": {
            "samples": snapshot.loop_lag_samples,
            **snapshot.loop_lag_ms,
            "worst_since_start": round(snapshot.loop_lag_worst_s * 1000, 3),
            "ran_max": round(snapshot.loop_lag_ran_s * 1000, 3),
        },
        "peers": {peer.url: peer.state for peer in snapshot.peers},
        # The replica protocol: the versions this node speaks, and the one each open channel speaks.
        "protocol": {
            "speaks": snapshot.protocols,
            "peers": {peer.url: peer.protocol for peer in snapshot.peers},
        },
        "rebuild": _rebuild_view(snapshot.rebuild),
        "clock": {
            "lead_ms": snapshot.clock_lead_us / 1000,
            "ignored_ahead": snapshot.clock_ignored,
            **_fence_view(snapshot.clock_fence),
        },
        "hints": {
            "pending": hints.pending,
            "kept": hints.kept,
            "delivered": hints.delivered,
            "dropped": hints.dropped,
        },
        "gc": dataclasses.asdict(snapshot.gc),
        "repair": _repair_view(snapshot.repair),
        "requests": {
            "inflight": snapshot.inflight,
            "shed": snapshot.shed,
            "shed_by": snapshot.shed_by,
            "starved": snapshot.starved,
        },
        "coordinator": {
            "rewrites": snapshot.rewrites,
            "read_repairs": snapshot.read_repairs,
            "skew_refusals": snapshot.skew_refusals,
        },
    }


def cluster_view(url: str, membership: Membership, snapshot: NodeSnapshot) -> dict[str, Any]:
    """The node's view of its cluster: the membership (members with their placement tokens), each
    member's channel state as this node sees it, the state of its data (as the member last said), this
    node's rebuild, and its hints by peer."""
    by_url = {peer.url: peer for peer in snapshot.peers}
    view = []
    for member in membership.urls:
        peer = by_url.get(member)
        if peer is None:
            view.append(
                {
                    "url": member,
                    "membership_state": membership.state_of(member),
                    "self": True,
                    "state": "self",
                    "reachable": True,
                    "down_for_s": 0.0,
                    "node_state": snapshot.rebuild.state,
                    "identity": snapshot.rebuild.identity,
                    "protocol": snapshot.protocols,
                }
            )
        else:
            view.append(
                {
                    "url": member,
                    "membership_state": membership.state_of(member),
                    "self": False,
                    "state": peer.state,
                    "reachable": peer.state == "connected",
                    "down_for_s": round(peer.down_for_s, 3),
                    "refusal": peer.refusal,
                    "node_state": peer.node_state,
                    "identity": peer.identity,
                    "protocol": peer.protocol,
                }
            )
    hints = snapshot.hints
    return {
        "node": url,
        "cluster_id": membership.cluster,
        "cluster": list(membership.urls),
        "tokens": list(membership.tokens),
        "membership_version": membership.version,
        "replication_factor": membership.replication,
        "next_replication_factor": membership.next_replication,  # 0: the factor is not changing
        "joining": sorted(membership.joining),
        "leaving": sorted(membership.leaving),
        "streamed": snapshot.membership_streamed,
        "members": view,
        "clock": _fence_view(snapshot.clock_fence),
        "gc": dataclasses.asdict(snapshot.gc),
        "rebuild": _rebuild_view(snapshot.rebuild),
        "hints": {
            "pending": {peer.url: hints.pending.get(peer.url, 0) for peer in snapshot.peers},
            "kept": {peer.url: hints.kept.get(peer.url, 0) for peer in snapshot.peers},
            "delivered": {peer.url: hints.delivered.get(peer.url, 0) for peer in snapshot.peers},
            "dropped": hints.dropped,
        },
    }


def _repair_view(repair: RepairFigures) -> dict[str, Any]:
    return {
        "summaries_ready": repair.summaries_ready,
        "summaries_rebuilt_from": repair.summaries_rebuilt,
        "exchanges": repair.exchanges,
        "segments_compared": repair.segments_compared,
        "segments_differing": repair.segments_differing,
        "records": repair.records,
    }


def _fence_view(fence: ClockFigures) -> dict[str, Any]:
    """The clock fence's verdict: whether this node is fenced, its offset, each peer's, and who is off."""
    return {
        "fenced": fence.fenced,
        "offset_ms": fence.offset_us / 1000,
        "measured_peers": fence.measured,
        "peer_offsets_ms": {peer: offset / 1000 for peer, offset in fence.peer_offsets_us.items()},
        "far": list(fence.far),
        "summary": fence.summary,
    }


def _rebuild_view(rebuild: RebuildFigures) -> dict[str, Any]:
    """This node's identity, the state of its data (serving, rebuilding, unknown) and its rebuild's
    progress (all zero when it never rebuilt since start)."""
    return {
        "identity": rebuild.identity,
        "state": rebuild.state,
        "peers": rebuild.peers,
        "peers_done": rebuild.peers_done,
        "records_received": rebuild.records_received,
        "seconds": rebuild.seconds,
        "attempts": rebuild.attempts,
        "waiting_for": rebuild.waiting_for,
    }


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
