"""A node's aiohttp application, wired from its open parts (kvnode.parts): the client API, the operator's
endpoints and the replica channel's routes, and what its shutdown closes. kvnode.serving runs it.

Shutdown (kvnode.serving): stop listening, wait for request bodies still arriving, close peers' replica
channels (here), let the client requests in flight finish, then close the parts.
"""

from __future__ import annotations

from aiohttp import web

from kvnode import http_api, observe
from kvnode.parts import PARTS, NodeParts

__all__ = ["create_app"]


def create_app(parts: NodeParts) -> web.Application:
    app = web.Application(client_max_size=parts.config.max_body_bytes)
    app[PARTS] = parts
    http_api.add_routes(app, parts)
    observe.add_routes(app, parts)
    parts.replica_server.add_routes(app)
    app.on_shutdown.append(_close_replica_channels)
    return app


async def _close_replica_channels(app: web.Application) -> None:
    await app[PARTS].replica_server.close_channels()
