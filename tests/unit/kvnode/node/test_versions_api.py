"""/v0/versions (kvnode.node.versions_api) on a node served in this process: every version it holds
streamed as frames, tombstones included, and versions written back with their own timestamps, each
outcome counted; a bad body refused in one line before anything is written. (tests/cluster/test_backup.py
backs up and restores real clusters.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvnode.storage.frames import END, FrameParser, encode_frame
from kvnode.storage.records import Record, decode, encode
from tests.drivers import Serve, ServedNode


async def versions(node: ServedNode, query: str = "") -> list[tuple[bytes, Record]]:
    status, body = await node.call("GET", f"/v0/versions{query}")
    assert status == 200 and body.endswith(END)
    parser = FrameParser()
    frames = parser.feed(body)
    parser.finish()  # the stream ended with its end frame
    return [(key, decode(raw)) for key, raw in frames]


async def restore(node: ServedNode, frames: list[tuple[bytes, Record]], query: str = "") -> Any:
    body = b"".join(encode_frame(key, encode(record)) for key, record in frames) + END
    status, answer = await node.call("POST", f"/v0/versions{query}", body)
    assert status == 200, answer
    return json.loads(answer)


async def test_every_version_is_streamed_in_key_order_tombstones_included(served: ServedNode) -> None:
    for key in ("b", "a", "c"):
        await served.put(key, key.encode())
    assert (await served.call("DELETE", "/v0/entity?id=b"))[0] == 202
    storage = served.parts.storage
    held = await versions(served)
    assert held == [(key, storage.read(key)) for key in (b"a", b"b", b"c")]
    assert [record.tombstone for _, record in held] == [False, True, False]
    assert [key for key, _ in await versions(served, "?start=b&end=c")] == [b"b"]
    assert await versions(served, "?start=d") == []


async def test_versions_are_written_with_their_own_timestamps_where_they_are_newer(
    served: ServedNode,
) -> None:
    await served.put("held", b"newer")
    old = served.parts.clock.now() - 1_000_000
    outcome = await restore(
        served, [(b"held", Record.put(old, b"older")), (b"new", Record.put(old, b"back"))]
    )
    assert outcome == {"written": 1, "kept": 1, "absent": 0, "failed": 0, "failure": ""}
    assert served.parts.storage.read(b"new") == Record.put(old, b"back")
    assert (await served.call("GET", "/v0/entity?id=held"))[1] == b"newer"


async def test_with_check_live_a_key_no_owner_holds_is_left_alone(served: ServedNode) -> None:
    old = served.parts.clock.now() - 1_000_000
    outcome = await restore(served, [(b"gone", Record.put(old, b"stale"))], "?check=live")
    assert (outcome["absent"], outcome["written"]) == (1, 0)
    assert served.parts.storage.read(b"gone") is None


@pytest.mark.parametrize(
    ("query", "body", "status", "reason"),
    [
        ("?check=dead", END, 400, b"query parameter 'check' takes only 'live', not 'dead'\n"),
        ("?force=1", END, 400, b"unknown query parameter 'force'"),
        ("", encode_frame(b"k", encode(Record.put(1, b"v"))), 400, b"the body is not frames of versions: "),
        ("", b"\x00" * (2 << 20), 413, b"body of 2097152 bytes exceeds the limit of "),
    ],
)
async def test_a_bad_request_is_refused_in_one_line_and_writes_nothing(
    serve: Serve, query: str, body: bytes, status: int, reason: bytes
) -> None:
    node = await serve(max_body_bytes=1024)
    answer = await node.call("POST", f"/v0/versions{query}", body)
    assert answer[0] == status and answer[1].startswith(reason) and answer[1].count(b"\n") == 1
    assert node.parts.storage.read(b"k") is None
