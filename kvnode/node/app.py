"""A node's aiohttp application, wired from its open parts (kvnode.node.parts): the client API, the operator's
endpoints and the replica channel's routes, one-line answers for unknown paths and methods, the client
token check (with ``--auth-tokens-file`` only: without it there is no middleware at all; the hot routes'
own is the gate's, kvnode.access.connections), and what its shutdown closes. kvnode.node.serving runs it.

Shutdown (kvnode.node.serving): stop listening, wait for request bodies still arriving, close peers' replica
channels (here), let the client requests in flight finish, then close the parts.
"""

from __future__ import annotations

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from kvnode.access.client_auth import ClientTokens, role_needed, token_refusal
from kvnode.access.connections import DIRECT_ROUTES, DIRECT_TOKENS
from kvnode.node import client_api, operator_api, stats, versions_api
from kvnode.node.parts import PARTS, NodeParts

__all__ = ["create_app"]


def create_app(parts: NodeParts) -> web.Application:
    middlewares = [] if parts.tokens is None else [_token_check(parts.tokens, parts.config.metrics_open)]
    app = web.Application(client_max_size=parts.config.max_body_bytes, middlewares=middlewares)
    app[PARTS] = parts
    # The hot routes skip the router and the middleware: the gate checks their tokens itself.
    app[DIRECT_ROUTES] = client_api.add_routes(app, parts)
    if parts.tokens is not None:
        app[DIRECT_TOKENS] = parts.tokens
    stats.add_routes(app, parts)
    operator_api.add_routes(app)
    versions_api.add_routes(app)
    parts.replica_server.add_routes(app)
    _answer_unrouted(app)
    app.on_shutdown.append(_close_replica_channels)
    return app


async def _close_replica_channels(app: web.Application) -> None:
    await app[PARTS].replica_server.close_channels()


def _token_check(tokens: ClientTokens, metrics_open: bool) -> Middleware:
    """401 (with ``WWW-Authenticate: Bearer``) for a request without a valid token, 403 for one whose
    role does not allow it (kvnode.access.client_auth); open paths pass untouched."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        # The path of the route that matched, not the request's: the role follows the handler that runs.
        resource = request.match_info.route.resource
        path = request.path if resource is None else resource.canonical
        needed = role_needed(request.method, path, metrics_open=metrics_open)
        authorization = request.headers.get(hdrs.AUTHORIZATION)
        refusal = token_refusal(tokens, needed, request.method, request.path, authorization)
        return refusal if refusal is not None else await handler(request)

    return check


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
