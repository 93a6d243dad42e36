"""A node's aiohttp application, wired from its open parts (kvnode.parts): the client API, the operator's
endpoints and the replica channel's routes, one-line answers for unknown paths and methods, and what its
shutdown closes. kvnode.serving runs it.

Shutdown (kvnode.serving): stop listening, wait for request bodies still arriving, close peers' replica
channels (here), let the client requests in flight finish, then close the parts.
"""

from __future__ import annotations

from aiohttp import web

from kvnode import admin_api, http_api, observe
from kvnode.admission import Handler
from kvnode.parts import PARTS, NodeParts

__all__ = ["create_app"]


def create_app(parts: NodeParts) -> web.Application:
    app = web.Application(client_max_size=parts.config.max_body_bytes)
    app[PARTS] = parts
    http_api.add_routes(app, parts)
    observe.add_routes(app, parts)
    admin_api.add_routes(app)
    parts.replica_server.add_routes(app)
    _answer_unrouted(app)
    app.on_shutdown.append(_close_replica_channels)
    return app


async def _close_replica_channels(app: web.Application) -> None:
    await app[PARTS].replica_server.close_channels()


def _answer_unrouted(app: web.Application) -> None:
    """A method a path does not take is a 405 naming the ones it does; an unknown path is a 404: both one
    line, as every other refusal (aiohttp's own bodies end without a newline). The routes go last, so a
    request for a route that exists never reaches them."""
    for resource in app.router.resources():
        if isinstance(resource, web.Resource):  # every one of ours: a plain path with its methods
            methods = sorted(route.method for route in resource)
            resource.add_route("*", _method_not_allowed(resource.canonical, methods))
    app.router.add_route("*", r"/{path:[\s\S]*}", _not_found)  # any character, a newline too


def _method_not_allowed(path: str, allowed: list[str]) -> Handler:
    async def refuse(request: web.Request) -> web.StreamResponse:
        raise web.HTTPMethodNotAllowed(
            request.method,
            allowed,
            text=f"{request.method} is not allowed on {path}; it takes {', '.join(allowed)}\n",
        )

    return refuse


async def _not_found(request: web.Request) -> web.StreamResponse:
    # The raw path, percent-escapes kept, so that an escaped newline cannot break the answer's one line.
    raise web.HTTPNotFound(text=f"no such path: {request.rel_url.raw_path}\n")
