"""A request's query string, parsed once and by hand (pure): each name's value, percent-decoded, and the
names given more than once.

It reads as yarl's ``URL.query`` does (``urllib.parse.parse_qsl`` with blank values kept: ``&`` between
pairs, an empty pair no parameter, ``+`` a space, a ``%`` that starts no escape kept as it is), without
the MultiDict yarl builds for every request; a value's bytes are kept as they decode, so a key that is not
UTF-8 is refused rather than read with U+FFFD in place of its bad bytes (which would give distinct ids one
key). Every refusal is a :class:`BadQuery` whose message is the one-line reason a 400 answers with.

>>> query = Query.parse("id=caf%C3%A9&ack=1")
>>> query.utf8("id"), query.single("ack"), query.single("from"), query.unknown(("id", "from"))
(b'caf\\xc3\\xa9', '1', None, 'ack')
>>> Query.parse("id=a&id=b").single("id")
Traceback (most recent call last):
...
kvnode.node.query.BadQuery: query parameter 'id' is given 2 times; give it once
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

__all__ = ["BadQuery", "Query"]


class BadQuery(ValueError):
    """A query parameter refused; the message is the one-line reason."""


class Query:
    """The parameters of one query string, each name with its first value and how often it was given."""

    __slots__ = ("_repeated", "_values")

    def __init__(self, values: dict[str, str], repeated: dict[str, int]) -> None:
        # Values whose bytes are not UTF-8 hold them as surrogate escapes (utf8 refuses those).
        self._values = values
        self._repeated = repeated  # name: times given, for the names given more than once

    @classmethod
    def parse(cls, raw: str) -> Query:
        """``raw``: the query string as the request line sent it, after its ``?``."""
        values: dict[str, str] = {}
        repeated: dict[str, int] = {}
        plain = "%" not in raw and "+" not in raw  # nearly every query: nothing to decode
        for pair in raw.split("&"):
            if not pair:
                continue
            name, _, value = pair.partition("=")
            if not plain:
                name, value = _decoded(name), _decoded(value)
            if name in values:
                repeated[name] = repeated.get(name, 1) + 1
            else:
                values[name] = value
        return cls(values, repeated)

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def unknown(self, known: tuple[str, ...]) -> str | None:
        """The first parameter (in the order given) that is not one of ``known``; None if none is."""
        for name in self._values:
            if name not in known:
                return _readable(name)
        return None

    # single and utf8 read the value themselves (no helper between): a request reads three or four.

    def single(self, name: str) -> str | None:
        """The parameter's one value (None if absent), bytes that are not UTF-8 read as U+FFFD."""
        if self._repeated and name in self._repeated:
            raise self._repeated_error(name)
        value = self._values.get(name)
        return value if value is None or value.isascii() else _readable(value)

    def utf8(self, name: str, *, allow_empty: bool = False) -> bytes:
        """The parameter's value as the UTF-8 bytes it decodes to: a key."""
        if self._repeated and name in self._repeated:
            raise self._repeated_error(name)
        value = self._values.get(name)
        if value is None or (not value and not allow_empty):
            raise BadQuery(f"query parameter {name!r} is required and must not be empty")
        try:
            return value.encode()
        except UnicodeEncodeError:
            raise BadQuery(f"query parameter {name!r} is not valid UTF-8 once percent-decoded") from None

    def _repeated_error(self, name: str) -> BadQuery:
        return BadQuery(f"query parameter {name!r} is given {self._repeated[name]} times; give it once")


def _decoded(text: str) -> str:
    """``text`` percent-decoded, ``+`` a space; bytes that are not UTF-8 kept as surrogate escapes."""
    if "+" in text:
        text = text.replace("+", " ")
    if "%" not in text:
        return text
    return unquote_to_bytes(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


def _readable(text: str) -> str:
    """``text`` with the bytes that are not UTF-8 as U+FFFD, as yarl reads them: for a 400's reason."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
