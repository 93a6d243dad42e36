"""The operator's commands over HTTP, which ``python -m kvnode admin`` calls: ``POST /v0/repair`` starts a
full anti-entropy repair of this node's keys with every peer (or joins the one running) and ``GET
/v0/repair`` shows its progress, both as JSON (kvnode.repair.scheduler.RepairRun)."""

from __future__ import annotations

import json

from aiohttp import web

from kvnode.parts import PARTS

__all__ = ["REPAIR_PATH", "add_routes"]

REPAIR_PATH = "/v0/repair"


def add_routes(app: web.Application) -> None:
    app.router.add_post(REPAIR_PATH, start_repair)
    app.router.add_get(REPAIR_PATH, repair_progress, allow_head=False)


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
