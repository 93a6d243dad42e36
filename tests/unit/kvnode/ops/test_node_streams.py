"""kvnode.ops.node_streams: the admin's binary requests to a node (a canned server in this process): an
answer read as it comes, a body of frames sent, each failure one line naming the node; the frames of a
stream, and one that breaks off or is not frames named by what it is; progress lines at most so often."""

from __future__ import annotations

import argparse
import io
import socket
import types

import pytest

from kvnode.ops import node_streams
from kvnode.ops.node_streams import READ_BYTES, Failed, Progress, frames, open_request, say
from kvnode.storage.frames import END, encode_frame
from kvnode.storage.records import Record, encode
from tests.canned_http import Answer, canned_server

FRAMES = [(b"k%05d" % index, encode(Record.put(index, b"v" * 200))) for index in range(1000)]
STREAM = b"".join(encode_frame(key, record) for key, record in FRAMES) + END


def args(token: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(token=token, tls_ca=None)


def test_an_answer_is_read_as_frames_as_it_comes() -> None:
    assert len(STREAM) > 2 * READ_BYTES  # read in more than one buffer
    answers = {"/v0/versions": Answer(200, STREAM)}
    with canned_server(answers) as node, open_request(args("t"), node.url, "/v0/versions", 10.0) as reply:
        assert list(frames(reply, "a's versions")) == FRAMES
    [sent] = node.requests
    assert (sent.method, sent.headers["Authorization"]) == ("GET", "Bearer t")


def test_a_body_of_frames_is_posted() -> None:
    answers = {"/v0/versions": Answer(200, b"{}")}
    with (
        canned_server(answers) as node,
        open_request(args(), node.url, "/v0/versions", 10.0, STREAM) as reply,
    ):
        assert reply.read() == b"{}"
    [sent] = node.requests
    assert (sent.method, sent.body, sent.headers["Content-Type"]) == (
        "POST",
        STREAM,
        "application/octet-stream",
    )
    assert "Authorization" not in sent.headers


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            Answer(413, b"too many versions in one request\nmore detail\n"),
            "413: too many versions in one request",
        ),
        (Answer(503), "503: Service Unavailable"),
    ],
)
def test_an_error_status_fails_naming_the_node_and_its_reasons_first_line(answer: Answer, said: str) -> None:
    with canned_server({"/v0/versions": answer}) as node, pytest.raises(Failed) as failed:
        open_request(args(), node.url, "/v0/versions", 10.0)
    assert str(failed.value) == f"{node.url} answered {said}"


def test_a_node_that_cannot_be_reached_fails_naming_it() -> None:
    with socket.socket() as bound:  # bound, never listening: a connection to it is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        with pytest.raises(Failed, match=f"^{url}: .*Connection refused"):
            open_request(args(), url, "/v0/versions", 10.0)


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (STREAM[: -len(END)], "the frames end without their end frame: cut short after 1000 frames"),
        (encode_frame(b"k", b"not a record") + END, "frame 1 (key b'k'): "),
    ],
)
def test_a_stream_that_is_cut_short_or_not_frames_fails_naming_what_it_is(stream: bytes, why: str) -> None:
    with pytest.raises(Failed) as failed:
        list(frames(io.BytesIO(stream), "b's versions"))
    assert str(failed.value).startswith(f"b's versions: {why}"), str(failed.value)


def test_a_stream_whose_connection_breaks_off_fails_naming_what_it_is() -> None:
    answers = {"/v0/versions": Answer(200, STREAM[:5000], length=len(STREAM))}
    with (
        canned_server(answers) as node,
        open_request(args(), node.url, "/v0/versions", 10.0) as reply,
        pytest.raises(Failed) as failed,
    ):
        list(frames(reply, "c's versions"))
    # Reads of a buffer at a time end quietly at the cut; the frames say the stream is not whole.
    assert str(failed.value).startswith("c's versions: the frames end without their end frame: cut short")


def test_progress_is_due_at_most_every_two_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = types.SimpleNamespace(now=100.0)
    monkeypatch.setattr(node_streams, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    progress = Progress()
    due = []
    for now in (101.0, 102.0, 103.0, 104.5, 105.0):
        clock.now = now
        due.append(progress.due())
    assert due == [False, True, False, True, False]


def test_a_progress_line_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    say("backup: 5 keys")
    assert capsys.readouterr() == ("", "backup: 5 keys\n")
