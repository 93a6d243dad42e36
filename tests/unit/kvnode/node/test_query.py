"""kvnode.node.query: a query string parsed once, as yarl's URL.query reads it, each parameter taken once,
a key UTF-8 once percent-decoded; every refusal a one-line reason."""

from __future__ import annotations

import pytest
from yarl import URL

from kvnode.node.query import BadQuery, Query


def reason(refused: pytest.ExceptionInfo[BadQuery]) -> str:
    text = str(refused.value)
    assert text and "\n" not in text
    return text


@pytest.mark.parametrize(
    "raw",
    [
        "id=key-00001234",
        "id=k&ack=2&from=3",
        "id=a+b&ack=%31",  # '+' a space; an escape of ASCII
        "id=a%2Bb%26c%3Dd",  # escaped delimiters are data
        "id=caf%C3%A9&ttl=10",
        "id=%2f%2F%c3%A9%e2%82%AC",  # hex digits in either case
        "id=k&&ack=1&",  # empty pairs are no parameters
        "id",  # no '=': an empty value
        "id=a=b",  # the first '=' splits
        "id=%zz%4",  # a '%' that starts no escape is kept
        "%69d=x",  # names are decoded too
        "id=a/b?c",
        "=v&id=k",  # an empty name
    ],
)
def test_it_reads_a_query_as_yarl_does(raw: str) -> None:
    expected = URL("/v0/entity?" + raw).query
    query = Query.parse(raw)
    assert query.unknown(tuple(expected)) is None
    for name in expected:
        assert name in query
        assert query.single(name) == expected[name]


def test_a_parameter_is_taken_once() -> None:
    query = Query.parse("end=a&start=b&end=c&%65nd=d")
    assert query.single("start") == "b" and query.single("other") is None
    with pytest.raises(BadQuery) as refused:
        query.single("end")
    assert reason(refused) == "query parameter 'end' is given 3 times; give it once"
    with pytest.raises(BadQuery) as refused:
        query.utf8("end")
    assert reason(refused) == "query parameter 'end' is given 3 times; give it once"


def test_the_first_unknown_parameter_in_the_order_given_is_named() -> None:
    assert Query.parse("start=a&stop=b&halt=c").unknown(("start", "end")) == "stop"
    assert Query.parse("start=a&end=b").unknown(("start", "end")) is None
    assert Query.parse("%FF=1").unknown(("id",)) == "\ufffd"  # bytes not UTF-8 named as yarl reads them


def test_a_key_is_the_utf8_of_its_percent_decoded_text() -> None:
    assert Query.parse("start=caf%C3%A9").utf8("start") == "café".encode()
    assert Query.parse("start=%EF%BF%BD").utf8("start") == "\ufffd".encode()  # U+FFFD itself, as UTF-8
    assert Query.parse("end=").utf8("end", allow_empty=True) == b""
    assert Query.parse("start=nul%00").utf8("start") == b"nul\x00"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", "query parameter 'start' is required and must not be empty"),
        ("start=", "query parameter 'start' is required and must not be empty"),
        ("start", "query parameter 'start' is required and must not be empty"),
        ("start=%FF", "query parameter 'start' is not valid UTF-8 once percent-decoded"),
        ("start=a%C3", "query parameter 'start' is not valid UTF-8 once percent-decoded"),
        ("start=%ED%A0%80", "query parameter 'start' is not valid UTF-8 once percent-decoded"),
    ],
)
def test_a_key_that_is_missing_empty_or_not_utf8_is_refused(raw: str, expected: str) -> None:
    with pytest.raises(BadQuery) as refused:
        Query.parse(raw).utf8("start")
    assert reason(refused) == expected


def test_a_value_that_is_not_a_key_reads_bad_bytes_as_yarl_does() -> None:
    for raw in ("ack=%FF", "ack=a%C3", "ack=%E2%82"):
        assert Query.parse(raw).single("ack") == URL("/?" + raw).query["ack"]
