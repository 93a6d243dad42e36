"""Parsing a client request's query parameters: each once, known to its path, UTF-8 where a key is; and
the plain one-line answers (kvnode.node.client_api and kvnode.node.scan_api)."""

from __future__ import annotations

import urllib.parse

from aiohttp import web

__all__ = ["bad_request", "known_only", "single", "text", "utf8"]


def known_only(request: web.Request, known: tuple[str, ...]) -> None:
    """400 for a query parameter the method and path do not take."""
    for name in request.query:
        if name not in known:
            takes = f"{request.method} {request.path} takes {', '.join(map(repr, known))}"
            raise bad_request(f"unknown query parameter {name!r}: {takes}")


def single(request: web.Request, name: str) -> str | None:
    """The query parameter's one value (None if absent); 400 if it is given more than once."""
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise bad_request(f"query parameter {name!r} is given {len(values)} times; give it once")
    return values[0] if values else None


def utf8(request: web.Request, name: str, *, allow_empty: bool = False) -> bytes:
    text = single(request, name)
    if text is None or (not text and not allow_empty):
        raise bad_request(f"query parameter {name!r} is required and must not be empty")
    if "\ufffd" in text and not _raw_isutf8(request, name):
        # yarl decodes a bad escape such as %FF to U+FFFD, which would give distinct ids one key.
        raise bad_request(f"query parameter {name!r} is not valid UTF-8 once percent-decoded")
    return text.encode("utf-8")


def _raw_isutf8(request: web.Request, name: str) -> bool:
    """Whether every value of ``name`` in the raw query string percent-decodes to valid UTF-8."""
    pairs = urllib.parse.parse_qsl(
        request.rel_url.raw_query_string, keep_blank_values=True, encoding="latin-1"
    )
    try:
        for raw_name, raw_value in pairs:
            if raw_name == name:
                raw_value.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def text(status: int, reason: str) -> web.Response:
    return web.Response(status=status, text=reason + "\n")


def bad_request(reason: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=reason + "\n")
