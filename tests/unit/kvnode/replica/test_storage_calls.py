"""kvnode.replica.storage_calls: a peer's reads, writes and scans answered from this node's storage; a
frame's writes stored with the loop iteration's pending ones by one write before it is answered, or every
call FAILED when that write fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kvnode.clocks.hybrid import HybridClock, wall_clock_us
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.readiness import NodeState
from kvnode.replica.storage_calls import StorageCalls
from kvnode.storage.group_commit import Pending
from kvnode.storage.keyspace import Storage, StorageFull
from kvnode.storage.records import Record, encode
from tests.replicas import storage_answerers, unjudged_fence


def test_it_answers_the_calls_on_this_node_s_storage(tmp_path: Path) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    answerers = Answerers()
    StorageCalls(
        storage, HybridClock(wall_clock_us(), 5_000_000), unjudged_fence(), lambda: NodeState.SERVING
    ).register(answerers)
    reads_and_writes = {wire.Op.READ, wire.Op.FETCH, wire.Op.WRITE, wire.Op.DELETE, wire.Op.SCAN}
    assert answerers.unanswered == set(wire.Op) - reads_and_writes
    storage.close()


async def test_a_frame_is_stored_with_the_iteration_s_pending_writes_by_one_write_before_its_replies(
    tmp_path: Path,
) -> None:
    """The node's own writes of the iteration (pending: its local replica's, as coordinator) join the
    frame's in one write, made before the frame is answered, so no reply waits for another loop turn."""
    storage = Storage.open(tmp_path, fsync=False)
    (answerers, _), record = storage_answerers(storage), encode(Record.put(wall_clock_us()() - 1, b"v"))
    writes: list[list[bytes]] = []
    write = storage._group._write

    def counted(pending: dict[bytes, Pending]) -> None:
        writes.append(sorted(pending))
        write(pending)

    storage._group._write = counted
    told: list[Exception | None] = []
    storage.offer(b"own", Record.put(wall_clock_us()() - 1, b"mine"))
    storage.when_written(told.append)
    frame = answerers.answer_frame(
        [wire.CallRequest(1, wire.Op.WRITE, b"a", record), wire.CallRequest(2, wire.Op.READ, b"a", b"")]
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


async def test_a_write_is_stored_as_the_bytes_its_call_carried_not_encoded_again(tmp_path: Path) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    (answerers, _), record = storage_answerers(storage), encode(Record.put(wall_clock_us()() - 1, b"v"))
    stored: list[bytes] = []
    write = storage._group._write

    def kept(pending: dict[bytes, Pending]) -> None:
        stored.extend(pending[key].encoded for key in pending)
        write(pending)

    storage._group._write = kept
    answerers.answer_frame([wire.CallRequest(1, wire.Op.WRITE, b"a", record)])
    assert len(stored) == 1 and stored[0] is record
    storage.close()


async def test_a_failed_group_commit_answers_every_call_of_its_frames_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    (answerers, _), record = storage_answerers(storage), encode(Record.put(wall_clock_us()() - 1, b"v"))

    def full() -> None:
        raise StorageFull("disk full: No space left on device")

    monkeypatch.setattr(storage, "_writable", full)
    frames = [
        answerers.answer_frame(
            [wire.CallRequest(1, wire.Op.WRITE, b"a", record), wire.CallRequest(2, wire.Op.READ, b"a", b"")]
        ),
        answerers.answer_frame([wire.CallRequest(3, wire.Op.WRITE, b"b", record)]),
    ]
    for frame in frames:
        for reply in wire.decode_replies(b"".join(frame)):
            assert (reply.status, reply.payload) == (
                wire.Status.FAILED,
                b"disk full: No space left on device",
            )
    assert storage.read(b"a") is None and storage.read(b"b") is None
    storage.close()
