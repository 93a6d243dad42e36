"""kvnode.ops.node_http: one JSON request to a node (a canned server in this process), and each failure in
a line that names the cause and the fix: a token missing or without the admin role, a refused change, a
node that does not answer or answers something that is not JSON."""

from __future__ import annotations

import socket

import pytest

from kvnode.ops.node_http import Refused, Unreachable, advice_for_status, fetch
from tests.canned_http import Answer, canned_server


@pytest.mark.parametrize(
    ("status", "token", "advice"),
    [
        (401, None, ": the node requires a client token: pass an admin token with --token-file FILE"),
        (401, "t", ": the node knows no such token: check the file given to --token-file"),
        (403, "t", ": the token's role is not admin: pass an admin token with --token-file FILE"),
        (500, "t", ""),
        (404, None, ""),
    ],
)
def test_an_error_status_is_advised_on_where_a_token_can_help(
    status: int, token: str | None, advice: str
) -> None:
    assert advice_for_status(status, token) == advice


def test_the_answer_is_the_nodes_json_asked_with_the_token() -> None:
    with canned_server(
        {"/v0/cluster": Answer(200, b'{"cluster": ["a"]}'), "/v0/repair": Answer(200, b"{}")}
    ) as node:
        assert fetch(node.url, "secret-token", None) == {"cluster": ["a"]}
        assert fetch(node.url, None, None, "/v0/repair", "POST") == {}
    asked, posted = node.requests
    assert (asked.method, asked.path, asked.headers["Authorization"]) == (
        "GET",
        "/v0/cluster",
        "Bearer secret-token",
    )
    assert (posted.method, posted.path, "Authorization" in posted.headers) == ("POST", "/v0/repair", False)


def test_a_refused_change_is_refused_with_the_nodes_reason() -> None:
    answers = {"/v0/leave": Answer(409, b"a change is under way\n")}
    with canned_server(answers) as node, pytest.raises(Refused) as refused:
        fetch(node.url, None, None, "/v0/leave", "POST")
    assert str(refused.value) == "a change is under way"


def test_an_error_status_names_the_request_and_what_to_do() -> None:
    with canned_server({"/v0/cluster": Answer(401)}) as node, pytest.raises(Unreachable) as failed:
        fetch(node.url, None, None)
    assert str(failed.value) == (
        f"GET {node.url}/v0/cluster answered 401 Unauthorized: the node requires a client token: pass an "
        "admin token with --token-file FILE"
    )


def test_an_answer_that_is_not_json_cannot_be_read() -> None:
    with canned_server({"/v0/cluster": Answer(200, b"<html>")}) as node, pytest.raises(Unreachable) as failed:
        fetch(node.url, None, None)
    assert str(failed.value).startswith(f"cannot read {node.url}/v0/cluster: ")


def test_a_port_nobody_listens_on_is_refused_naming_the_fix() -> None:
    with socket.socket() as bound:  # bound, never listening: a connection to it is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        with pytest.raises(Unreachable) as failed:
            fetch(url, None, None)
        with pytest.raises(Unreachable) as member:  # a member's URL, as a node named it: no --url advice
            fetch(url, None, None, member=True)
    assert str(failed.value) == (
        f"cannot reach {url}: connection refused: check --url (or KVNODE_URL), and that the node runs"
    )
    assert str(member.value) == f"cannot reach {url}: connection refused"


def test_a_node_that_closes_without_an_answer_and_serves_no_https_cannot_be_read() -> None:
    """What a TLS node does to plain HTTP, from a node that speaks no TLS either."""
    with canned_server({"/v0/cluster": Answer(0)}) as node, pytest.raises(Unreachable) as failed:
        fetch(node.url, None, None)
    assert (
        str(failed.value)
        == f"cannot read {node.url}/v0/cluster: Remote end closed connection without response"
    )
