"""kvnode.node.params: a request's query parsed from its request line as sent, known to its path, and
refused with a one-line 400 otherwise; the one-line answers."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from kvnode.node.params import bad_request, query_of, text


def get(query: str, path: str = "/v0/scan") -> web.Request:
    return make_mocked_request("GET", f"{path}?{query}")


def refusal(error: web.HTTPBadRequest) -> str:
    assert error.status == 400 and error.text is not None
    assert error.text.endswith("\n") and error.text.count("\n") == 1
    return error.text


def test_a_parameter_the_path_does_not_take_is_named_with_those_it_does() -> None:
    assert query_of(get("start=a&end=b"), ("start", "end")).single("end") == "b"
    with pytest.raises(web.HTTPBadRequest) as refused:
        query_of(get("start=a&stop=b"), ("start", "end"))
    assert refusal(refused.value) == "unknown query parameter 'stop': GET /v0/scan takes 'start', 'end'\n"


def test_the_query_is_read_from_the_request_line_as_sent() -> None:
    query = query_of(get("start=caf%C3%A9&end=a+b%2Bc"), ("start", "end"))
    assert (query.utf8("start"), query.single("end")) == ("café".encode(), "a b+c")
    assert query_of(make_mocked_request("GET", "/v0/scan"), ("start",)).single("start") is None
    # A fragment is no part of the query.
    assert query_of(get("start=a#end=b"), ("start",)).single("start") == "a"


def test_answers_are_one_line() -> None:
    answer = text(503, "overloaded")
    assert (answer.status, answer.text) == (503, "overloaded\n")
    assert refusal(bad_request("no")) == "no\n"
