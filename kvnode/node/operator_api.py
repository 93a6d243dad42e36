"""The operator's commands over HTTP, which ``python -m kvnode admin`` calls: ``POST /v0/repair`` starts a
full anti-entropy repair of this node's keys with every peer (or joins the one running) and ``GET
/v0/repair`` shows its progress, both as JSON (kvnode.healing.outcomes.RepairRun); ``POST /v0/cleanup``
starts a cleanup of this node's surplus copies (the versions of keys it no longer owns, dropped without
the grace period once their owners hold them: kvnode.healing.gc) or joins the one running, 409 with the
reason while a membership change is under way, and ``GET /v0/cleanup`` shows its progress, both as JSON
(kvnode.healing.cleanup_run.CleanupRun); ``POST
/v0/leave?member=URL`` makes a member leave (kvnode.cluster.changes.start_leave): 202 with the
membership version that has it leaving and the change under way (as ``/v0/cluster`` says it: its kind,
its member, the member that walks it, its version), or 409 with the one-line reason it cannot; ``POST
/v0/replication-factor?n=N`` moves the cluster to N owners a key (kvnode.cluster.changes.start_resize):
202 with the membership version that begins it and the change, 400 for an N out of 1..members, 409 as a
leave. ``POST /v0/remove?member=URL`` undoes the join of a member that claimed one and will never come
(kvnode.cluster.changes.undo_join): 200 with the membership version without it, or 409 and why not (a
member like the others leaves instead). ``GET /v0/paxos?id=KEY`` shows this node's Paxos acceptor state for
the key (kvnode.paxos.acceptor: the ballot promised, the proposal accepted and not yet committed, the most
recent commit), for ``admin locate``."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from kvnode.cluster.changes import start_leave, start_resize, undo_join
from kvnode.config import ReplicationFactor
from kvnode.healing.cleanup_run import CleanupRefused, CleanupRun
from kvnode.healing.outcomes import RepairRun
from kvnode.node.params import bad_request, query_of
from kvnode.node.parts import PARTS
from kvnode.node.query import BadQuery
from kvnode.paxos.ballot import ZERO_BALLOT
from kvnode.paxos.conditions import etag
from kvnode.replica.errors import ReplicaError
from kvnode.topology.adoption import NotAdopted
from kvnode.topology.change_steps import change_under_way
from kvnode.topology.membership import ChangeRefused, Membership

__all__ = [
    "CLEANUP_PATH",
    "LEAVE_PATH",
    "PAXOS_PATH",
    "REMOVE_PATH",
    "REPAIR_PATH",
    "RESIZE_PATH",
    "add_routes",
]

REPAIR_PATH = "/v0/repair"
CLEANUP_PATH = "/v0/cleanup"
LEAVE_PATH = "/v0/leave"
REMOVE_PATH = "/v0/remove"
RESIZE_PATH = "/v0/replication-factor"
PAXOS_PATH = "/v0/paxos"


def add_routes(app: web.Application) -> None:
    app.router.add_post(REPAIR_PATH, start_repair)
    app.router.add_get(REPAIR_PATH, repair_progress, allow_head=False)
    app.router.add_post(CLEANUP_PATH, start_cleanup)
    app.router.add_get(CLEANUP_PATH, cleanup_progress, allow_head=False)
    app.router.add_post(LEAVE_PATH, leave)
    app.router.add_post(RESIZE_PATH, resize)
    app.router.add_post(REMOVE_PATH, remove)
    app.router.add_get(PAXOS_PATH, paxos_state, allow_head=False)


async def paxos_state(request: web.Request) -> web.Response:
    parts = request.app[PARTS]
    try:
        key = query_of(request, ("id",)).utf8("id")
    except BadQuery as error:
        raise bad_request(str(error)) from None
    state = parts.acceptor.state(key)
    accepted = state.accepted
    shown = None
    if accepted is not None:
        shown = {
            "ballot": str(accepted.ballot),
            "etag": etag(accepted.record),
            "delete": accepted.record.tombstone,
        }
    body = {
        "node": parts.config.url,
        "key": key.decode("utf-8", "replace"),
        "promised": None if state.promised == ZERO_BALLOT else str(state.promised),
        "accepted": shown,
        "committed": None if state.committed == ZERO_BALLOT else str(state.committed),
    }
    return web.json_response(body, dumps=_dumps)


async def leave(request: web.Request) -> web.Response:
    parts = request.app[PARTS]
    member = request.query.get("member", "")
    try:
        plan = await start_leave(parts.members, member, parts.config.timeout)
    except (ChangeRefused, NotAdopted, ReplicaError) as refusal:
        return web.Response(status=409, text=f"{refusal}\n")
    body = {"member": member, "membership_version": plan.version, "change": _change(plan)}
    return web.json_response(body, status=202, dumps=_dumps)


async def resize(request: web.Request) -> web.Response:
    parts = request.app[PARTS]
    given = request.query.get("n", "")
    replication: int | ReplicationFactor
    try:  # N in every datacenter, or DC:N,DC:N,...
        replication = ReplicationFactor.parse(given) if ":" in given else int(given)
    except ValueError as error:
        reason = (
            str(error) if ":" in given else f"query parameter 'n' must be a whole number, not {given[:40]!r}"
        )
        return web.Response(status=400, text=f"{reason}\n")
    try:
        plan = await start_resize(parts.members, replication, parts.config.timeout)
    except ValueError as error:  # not from 1 to the members, a datacenter misnamed or left out
        return web.Response(status=400, text=f"{error}\n")
    except (ChangeRefused, NotAdopted, ReplicaError) as refusal:
        return web.Response(status=409, text=f"{refusal}\n")
    assert plan.next_replication is not None
    body = {
        "replication_factor": plan.next_replication.to_json(),
        "membership_version": plan.version,
        "change": _change(plan),
    }
    return web.json_response(body, status=202, dumps=_dumps)


async def remove(request: web.Request) -> web.Response:
    members = request.app[PARTS].members
    member = request.query.get("member", "")
    try:
        plan = await undo_join(members, member, "removed by the operator")
    except (ChangeRefused, NotAdopted, ReplicaError) as refusal:
        return web.Response(status=409, text=f"{refusal}\n")
    body = {"member": member, "membership_version": plan.version, "cluster": list(plan.urls)}
    return web.json_response(body, dumps=_dumps)


async def start_repair(request: web.Request) -> web.Response:
    run = request.app[PARTS].anti_entropy.request_run()
    return web.json_response(run.to_json(), status=202, dumps=_dumps)


async def repair_progress(request: web.Request) -> web.Response:
    return _progress(request.app[PARTS].anti_entropy.run, "repair")


async def start_cleanup(request: web.Request) -> web.Response:
    try:
        run = request.app[PARTS].gc.request_cleanup()
    except CleanupRefused as refusal:
        return web.Response(status=409, text=f"{refusal}\n")
    return web.json_response(run.to_json(), status=202, dumps=_dumps)


async def cleanup_progress(request: web.Request) -> web.Response:
    return _progress(request.app[PARTS].gc.cleanup, "cleanup")


def _progress(run: RepairRun | CleanupRun | None, what: str) -> web.Response:
    """The run's progress as JSON; 404 when none was asked (``what``: a repair, a cleanup)."""
    if run is None:
        return web.Response(status=404, text=f"no {what} has been asked of this node since it started\n")
    return web.json_response(run.to_json(), dumps=_dumps)


def _change(plan: Membership) -> dict[str, Any] | None:
    """The change ``plan`` begins, for the operator to follow (``admin leave --wait``)."""
    change = change_under_way(plan)
    return None if change is None else change.to_json()


def _dumps(body: object) -> str:
    return json.dumps(body, indent=2) + "\n"
