"""kvnode.node.params: a client request's query parameters, each taken once, known to its path, UTF-8
where a key is, and refused with a one-line 400 otherwise."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from kvnode.node.params import bad_request, known_only, single, text, utf8


def get(query: str, path: str = "/v0/scan") -> web.Request:
    return make_mocked_request("GET", f"{path}?{query}")


def refusal(error: web.HTTPBadRequest) -> str:
    assert error.status == 400 and error.text is not None
    assert error.text.endswith("\n") and error.text.count("\n") == 1
    return error.text


def test_a_parameter_the_path_does_not_take_is_named_with_those_it_does() -> None:
    known_only(get("start=a&end=b"), ("start", "end"))
    with pytest.raises(web.HTTPBadRequest) as refused:
        known_only(get("start=a&stop=b"), ("start", "end"))
    assert refusal(refused.value) == "unknown query parameter 'stop': GET /v0/scan takes 'start', 'end'\n"


def test_a_parameter_is_taken_once() -> None:
    assert single(get("start=a"), "start") == "a"
    assert single(get("start=a"), "end") is None
    with pytest.raises(web.HTTPBadRequest) as refused:
        single(get("end=a&start=b&end=c"), "end")
    assert refusal(refused.value) == "query parameter 'end' is given 2 times; give it once\n"


def test_a_key_is_the_utf8_of_its_percent_decoded_text() -> None:
    assert utf8(get("start=caf%C3%A9"), "start") == "café".encode()
    assert utf8(get("start=%EF%BF%BD"), "start") == "\ufffd".encode()  # U+FFFD itself, sent as UTF-8
    assert utf8(get("end="), "end", allow_empty=True) == b""


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "query parameter 'start' is required and must not be empty\n"),
        ("start=", "query parameter 'start' is required and must not be empty\n"),
        ("start=%FF", "query parameter 'start' is not valid UTF-8 once percent-decoded\n"),
        ("start=a%C3", "query parameter 'start' is not valid UTF-8 once percent-decoded\n"),
    ],
)
def test_a_key_that_is_missing_empty_or_not_utf8_is_refused(query: str, reason: str) -> None:
    with pytest.raises(web.HTTPBadRequest) as refused:
        utf8(get(query), "start")
    assert refusal(refused.value) == reason


def test_answers_are_one_line() -> None:
    answer = text(503, "overloaded")
    assert (answer.status, answer.text) == (503, "overloaded\n")
    assert refusal(bad_request("no")) == "no\n"
