"""A key's version as the client sees it (its value and its ETag), and the ETag headers of conditional
writes, read from an answer and written into a request.

An ETag is opaque to a client: the node names a version with it (``ETag: "V"``) and a conditional write
names the version it must replace with it (``If-Match: "V"``). The client hands it to callers without the
quotes::

    >>> etag_of({"ETag": '"000000000000005f954d9c2fc92f70ef"'})
    '000000000000005f954d9c2fc92f70ef'
    >>> etag_of({}) is None
    True
    >>> condition_headers("000000000000005f954d9c2fc92f70ef")
    {'If-Match': '"000000000000005f954d9c2fc92f70ef"'}
    >>> condition_headers(None)
    {'If-None-Match': '*'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["Versioned", "condition_headers", "etag_of"]


class Versioned(NamedTuple):
    """A key's live value and the ETag naming its version (``Client.get_versioned``)."""

    value: bytes
    etag: str  # unquoted, opaque


def etag_of(headers: Mapping[str, str]) -> str | None:
    """The ETag an answer names, unquoted (None: it names none)."""
    quoted = headers.get("ETag")
    if quoted is None:
        return None
    return quoted.strip().removeprefix('"').removesuffix('"')


def condition_headers(etag: str | None) -> dict[str, str]:
    """The condition of a conditional write: the version ``etag`` must be the key's newest
    (``If-Match``), or with None, the key must have no live value (``If-None-Match: *``)."""
    return {"If-None-Match": "*"} if etag is None else {"If-Match": f'"{etag}"'}
