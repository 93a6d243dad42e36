"""kvnode.client.errors: the error each answer that is not a success stands for, with the node's reason;
a refused conditional write's current version."""

from __future__ import annotations

import pytest

from kvnode.client.errors import (
    Answer,
    BadRequest,
    KvnodeError,
    NotFound,
    OutcomeUnknown,
    Overloaded,
    PreconditionFailed,
    QuorumNotReached,
    ServerError,
    Unreachable,
    error_of,
)
from kvnode.client.versions import Versioned

URL = "http://n1:8080"


def answer(status: int, body: bytes = b"", **headers: str) -> Answer:
    return Answer(URL, status, body, headers)


def test_a_gets_404_is_not_found_but_a_deletes_is_a_bad_request() -> None:
    found = error_of(answer(404, b"no such key\n"), "GET")
    assert isinstance(found, NotFound) and found.reason == "no such key"
    assert str(found) == f"{URL}: no such key"
    refused = error_of(answer(404, b"no such path: /v0/x\n"), "DELETE")
    assert isinstance(refused, BadRequest) and refused.status == 404


def test_a_4xx_is_a_bad_request_with_its_status_and_the_nodes_line() -> None:
    error = error_of(answer(401, b"a client token is needed\n"), "PUT")
    assert isinstance(error, BadRequest)
    assert (error.status, error.reason, str(error)) == (
        401,
        "a client token is needed",
        f"{URL}: 401 a client token is needed",
    )


def test_a_504_is_a_quorum_not_reached() -> None:
    assert isinstance(error_of(answer(504, b"1 of 2 acks\n"), "PUT"), QuorumNotReached)


@pytest.mark.parametrize(
    ("retry_after", "seconds"),
    [("3", 3.0), ("0.5", 0.5), ("-2", 0.0), ("Wed, 21 Oct 2026 07:28:00 GMT", 1.0)],
)
def test_a_503_is_overloaded_for_its_retry_after(retry_after: str, seconds: float) -> None:
    error = error_of(answer(503, b"overloaded\n", **{"Retry-After": retry_after}), "GET")
    assert isinstance(error, Overloaded) and error.retry_after == seconds


def test_a_503_without_retry_after_waits_a_second() -> None:
    error = error_of(answer(503), "GET")
    assert isinstance(error, Overloaded) and error.retry_after == 1.0
    assert error.reason == "status 503"  # no body: the status stands for the reason


def test_anything_else_is_a_server_error_with_its_status() -> None:
    error = error_of(answer(500, b"storage failed\n"), "GET")
    assert isinstance(error, ServerError)
    assert (error.status, error.reason) == (500, "storage failed")
    assert isinstance(error_of(answer(302), "GET"), ServerError)


def test_every_error_is_a_kvnode_error_naming_the_node() -> None:
    unreachable = Unreachable(URL, "connection refused", maybe_applied=True)
    assert isinstance(unreachable, KvnodeError) and unreachable.maybe_applied
    assert (unreachable.url, str(unreachable)) == (URL, f"{URL}: connection refused")
    assert not Unreachable(URL, "connection refused").maybe_applied


def test_a_precondition_failed_carries_the_current_version_or_none() -> None:
    current = Versioned(b"v", "00ff")
    refused = PreconditionFailed(URL, "precondition failed: the key has a live value", current)
    assert (refused.current, refused.etag, refused.value) == (current, "00ff", b"v")
    absent = PreconditionFailed(URL, "precondition failed: the key has no version", None)
    assert (absent.current, absent.etag, absent.value) == (None, None, None)
    assert isinstance(absent, KvnodeError) and isinstance(OutcomeUnknown(URL, "504"), KvnodeError)
    assert not isinstance(OutcomeUnknown(URL, "504"), QuorumNotReached)  # not a write to retry as it is
