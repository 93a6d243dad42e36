"""The operator's commands over HTTP, which ``python -m kvnode admin`` calls: ``POST /v0/repair`` starts a
full anti-entropy repair of this node's keys with every peer (or joins the one running) and ``GET
/v0/repair`` shows its progress, both as JSON (kvnode.healing.anti_entropy.RepairRun); ``POST
/v0/leave?member=URL`` makes a member leave (kvnode.cluster.changes.start_leave): 202 with the
membership version that has it leaving, or 409 with the one-line reason it cannot; ``POST
/v0/remove?member=URL`` undoes the join of a member that claimed one and will never come
(kvnode.cluster.join_undo.undo_join): 200 with the membership version without it, or 409 and why not (a
member like the others leaves instead)."""

from __future__ import annotations

import json

from aiohttp import web

from kvnode.cluster.changes import start_leave
from kvnode.cluster.join_undo import undo_join
from kvnode.cluster.members import NotAdopted
from kvnode.node.parts import PARTS
from kvnode.replica.errors import ReplicaError
from kvnode.topology.membership import ChangeRefused

__all__ = ["LEAVE_PATH", "REMOVE_PATH", "REPAIR_PATH", "add_routes"]

REPAIR_PATH = "/v0/repair"
LEAVE_PATH = "/v0/leave"
REMOVE_PATH = "/v0/remove"


def add_routes(app: web.Application) -> None:
    app.router.add_post(REPAIR_PATH, start_repair)
    app.router.add_get(REPAIR_PATH, repair_progress, allow_head=False)
    app.router.add_post(LEAVE_PATH, leave)
    app.router.add_post(REMOVE_PATH, remove)


async def leave(request: web.Request) -> web.Response:
    parts = request.app[PARTS]
    member = request.query.get("member", "")
    try:
        plan = await start_leave(parts.members, member, parts.config.timeout)
    except (ChangeRefused, NotAdopted, ReplicaError) as refusal:
        return web.Response(status=409, text=f"{refusal}\n")
    body = {"member": member, "membership_version": plan.version}
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
    run = request.app[PARTS].anti_entropy.run
    if run is None:
        return web.Response(status=404, text="no repair has been asked of this node since it started\n")
    return web.json_response(run.to_json(), dumps=_dumps)


def _dumps(body: object) -> str:
    return json.dumps(body, indent=2) + "\n"
