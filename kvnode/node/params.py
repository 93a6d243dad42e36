"""A client request's query parameters, parsed once (kvnode.node.query) and known to its path; and the plain
one-line answers (kvnode.node.client_api, kvnode.node.scan_api and kvnode.node.versions_api)."""

from __future__ import annotations

from aiohttp import web

from kvnode.node.query import Query

__all__ = ["bad_request", "query_of", "text"]


def query_of(request: web.Request, known: tuple[str, ...]) -> Query:
    """The request's query parameters, from its request line as sent; 400 for one the method and path do
    not take. The handler turns a BadQuery from the Query's reads into bad_request."""
    raw = request.raw_path.partition("?")[2]
    if "#" in raw:
        raw = raw.partition("#")[0]  # a fragment is no part of the query, as yarl reads the target
    query = Query.parse(raw)
    name = query.unknown(known)
    if name is not None:
        takes = f"{request.method} {request.path} takes {', '.join(map(repr, known))}"
        raise bad_request(f"unknown query parameter {name!r}: {takes}")
    return query


def text(status: int, reason: str, etag: str = "") -> web.Response:
    """A one-line answer; with ``etag``, the ETag header of the version it is about."""
    if etag:
        return web.Response(status=status, text=reason + "\n", headers={"ETag": etag})
    return web.Response(status=status, text=reason + "\n")


def bad_request(reason: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=reason + "\n")
