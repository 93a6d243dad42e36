"""kvnode.node.peer_answers: a peer's calls answered from this node's storage: one answerer a call of the
protocol; a frame's writes stored with the loop iteration's pending ones by one write before it is
answered, or every call FAILED when that write fails; a CLOCK answer and a clock ping's pong carry the
same payload."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import wall_clock_us
from kvnode.clocks.offsets import ClockOffsets
from kvnode.node.peer_answers import ANSWERERS
from kvnode.replica import wire
from kvnode.replica.clock_probe import clock_pong
from kvnode.replica.protocol import PROTOCOL
from kvnode.storage.group_commit import Pending
from kvnode.storage.keyspace import Storage, StorageFull
from kvnode.storage.records import Record, encode
from tests.replicas import call_answers


def test_the_server_answers_every_call_of_the_protocol_and_no_other() -> None:
    """One table of the replica calls: the peer resolves replies by PROTOCOL, the server answers by
    ANSWERERS; every op of the wire is in both."""
    assert set(ANSWERERS) == set(PROTOCOL) == set(wire.Op)


def test_a_clock_answer_and_a_clock_pings_pong_carry_this_nodes_clock_and_the_state_of_its_data(
    tmp_path: Path,
) -> None:
    wall_us = 1_700_000_000_123_456  # this node's wall clock, as its fence reads it
    fence = ClockFence(lambda: wall_us, 5_000_000, ClockOffsets(max_age_s=10.0), peers=0)
    answers = dataclasses.replace(call_answers(), fence=fence)
    storage = Storage.open(tmp_path, fsync=False)
    try:
        frame = answers.answer_calls(storage, [wire.CallRequest(1, wire.Op.CLOCK, b"", b"")])
    finally:
        storage.close()
    clock = wire.encode_clock(wall_us, "serving")
    assert wire.decode_replies(b"".join(frame)) == [(1, wire.Status.CLOCK, clock)]
    ping = wire.encode_timestamp(wall_us - 500)  # the pinger's clock
    assert clock_pong(ping, answers.clock_now) == ping + clock


async def test_a_frame_is_stored_with_the_iteration_s_pending_writes_by_one_write_before_its_replies(
    tmp_path: Path,
) -> None:
    """The node's own writes of the iteration (pending: its local replica's, as coordinator) join the
    frame's in one write, made before the frame is answered, so no reply waits for another loop turn."""
    storage = Storage.open(tmp_path, fsync=False)
    answers, record = call_answers(), encode(Record.put(wall_clock_us()() - 1, b"v"))
    writes: list[list[bytes]] = []
    write = storage._group._write

    def counted(pending: dict[bytes, Pending]) -> None:
        writes.append(sorted(pending))
        write(pending)

    storage._group._write = counted
    told: list[Exception | None] = []
    storage.batch().apply(b"own", Record.put(wall_clock_us()() - 1, b"mine"))
    storage.when_written(told.append)
    frame = answers.answer_calls(
        storage,
        [wire.CallRequest(1, wire.Op.WRITE, b"a", record), wire.CallRequest(2, wire.Op.READ, b"a", b"")],
    )
    assert writes == [[b"a", b"own"]] and told == [None]
    replies = wire.decode_replies(b"".join(frame))
    assert [(reply.call_id, reply.status, reply.payload) for reply in replies] == [
        (1, wire.Status.STORED, b""),
        (2, wire.Status.FOUND, record),
    ]
    await asyncio.sleep(0)  # the iteration's scheduled commit finds nothing left to write
    assert writes == [[b"a", b"own"]]
    storage.close()


async def test_a_failed_group_commit_answers_every_call_of_its_frames_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    answers, record = call_answers(), encode(Record.put(wall_clock_us()() - 1, b"v"))

    def full() -> None:
        raise StorageFull("disk full: No space left on device")

    monkeypatch.setattr(storage, "_writable", full)
    frames = [
        answers.answer_calls(
            storage,
            [wire.CallRequest(1, wire.Op.WRITE, b"a", record), wire.CallRequest(2, wire.Op.READ, b"a", b"")],
        ),
        answers.answer_calls(storage, [wire.CallRequest(3, wire.Op.WRITE, b"b", record)]),
    ]
    for frame in frames:
        for reply in wire.decode_replies(b"".join(frame)):
            assert (reply.status, reply.payload) == (
                wire.Status.FAILED,
                b"disk full: No space left on device",
            )
    assert storage.read(b"a") is None and storage.read(b"b") is None
    storage.close()
