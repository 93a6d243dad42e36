"""kvnode.storage.group_commit step by step, with a write of the test's own: an iteration's writes are one
write, reads and later writes see the pending version, an older write loses to it, waiters hear only
after the write, and a failed write fails every waiter and leaves nothing pending."""

from __future__ import annotations

import pytest

from kvnode.storage.group_commit import GroupCommit, Pending, Waiter
from kvnode.storage.records import Record, encode
from tests.harness import group_written


class Disk:
    """A stored version per key, and a log of what happened in order (writes, waiters told)."""

    def __init__(self) -> None:
        self.stored: dict[bytes, Record] = {}
        self.log: list[object] = []
        self.failure: Exception | None = None

    def current(self, key: bytes) -> tuple[Record | None, bytes | None]:
        record = self.stored.get(key)
        return record, None if record is None else encode(record)

    def write(self, writes: dict[bytes, Pending]) -> None:
        if self.failure is not None:
            raise self.failure
        self.log.append(sorted(writes))
        self.stored.update((key, pending.record) for key, pending in writes.items())

    def waiter(self, name: str) -> Waiter:
        """A waiter that logs its name and what it was told."""
        return lambda failure: self.log.append((name, failure))


class Full(Exception):
    """The test's write failure."""


@pytest.fixture
def disk() -> Disk:
    return Disk()


async def test_the_writes_of_one_iteration_are_one_write_told_to_waiters_after_it(disk: Disk) -> None:
    group = GroupCommit(disk.write, Full)
    group.offer_soon(b"a", Record.put(1, b"a"), disk.current)
    group.wait(disk.waiter("first"))
    group.offer_soon(b"b", Record.put(1, b"b"), disk.current)
    group.offer_soon(b"a", Record.put(2, b"a2"), disk.current)
    group.wait(disk.waiter("second"))
    assert disk.log == [] and disk.stored == {}  # nothing written, nobody told, within the iteration
    await group_written(group.wait)
    assert disk.log == [[b"a", b"b"], ("first", None), ("second", None)]
    assert disk.stored == {b"a": Record.put(2, b"a2"), b"b": Record.put(1, b"b")}
    assert group.writes == {}


async def test_the_next_iteration_is_the_next_write(disk: Disk) -> None:
    group = GroupCommit(disk.write, Full)
    group.offer_soon(b"a", Record.put(1, b"a"), disk.current)
    await group_written(group.wait)
    group.offer_soon(b"b", Record.put(1, b"b"), disk.current)
    await group_written(group.wait)
    assert disk.log == [[b"a"], [b"b"]]


def test_a_pending_version_is_read_and_an_older_write_loses_to_it(disk: Disk) -> None:
    disk.stored[b"k"] = Record.put(5, b"stored")
    group = GroupCommit(disk.write, Full)
    assert group.offer(b"k", Record.put(4, b"older"), disk.current) == Record.put(5, b"stored")
    assert group.writes == {}  # lost to the stored version: nothing to write
    assert group.offer(b"k", Record.put(7, b"new"), disk.current) == Record.put(7, b"new")
    assert group.offer(b"k", Record.put(6, b"between"), disk.current) == Record.put(7, b"new")
    assert group.writes[b"k"] == Pending(
        Record.put(7, b"new"), encode(Record.put(7, b"new")), encode(disk.stored[b"k"])
    )
    assert group.offer(b"k", Record.delete(8), disk.current) == Record.delete(8)
    # The bytes a pending write replaces stay the stored ones: the change listener hears stored -> last.
    assert group.writes[b"k"].replaced == encode(Record.put(5, b"stored"))


def test_a_write_given_its_bytes_is_stored_as_them_and_one_without_is_encoded(disk: Disk) -> None:
    """A coordinator's write to several replicas, and a peer's write as its frame carried it, are encoded
    once, by their sender."""
    group = GroupCommit(disk.write, Full)
    record = Record.put(5, b"v")
    given = encode(record)
    group.offer(b"k", record, disk.current, given)
    group.offer(b"j", record, disk.current)
    assert group.writes[b"k"].encoded is given and group.writes[b"j"].encoded == given


def test_a_waiter_with_nothing_pending_is_told_at_once(disk: Disk) -> None:
    group = GroupCommit(disk.write, Full)
    group.wait(disk.waiter("alone"))
    assert disk.log == [("alone", None)]


async def test_a_failed_write_fails_every_waiter_and_leaves_nothing_pending(disk: Disk) -> None:
    disk.stored[b"k"] = Record.put(1, b"stored")
    disk.failure = Full("disk full")
    group = GroupCommit(disk.write, Full)
    group.offer_soon(b"k", Record.put(2, b"lost"), disk.current)
    group.offer_soon(b"j", Record.put(2, b"lost too"), disk.current)
    group.wait(disk.waiter("first"))
    group.wait(disk.waiter("second"))
    with pytest.raises(Full, match="disk full"):
        await group_written(group.wait)
    assert disk.log == [("first", disk.failure), ("second", disk.failure)]
    assert group.writes == {} and disk.stored == {b"k": Record.put(1, b"stored")}
    # What failed is gone: the next write competes with the stored version again.
    disk.failure = None
    assert group.offer(b"k", Record.put(2, b"again"), disk.current) == Record.put(2, b"again")


def test_a_commit_made_at_once_raises_its_failure_after_telling_the_waiters(disk: Disk) -> None:
    disk.failure = Full("io error")
    group = GroupCommit(disk.write, Full)
    group.offer(b"k", Record.put(1, b"v"), disk.current)
    group.wait(disk.waiter("waiting"))
    with pytest.raises(Full, match="io error"):
        group.commit()
    assert disk.log == [("waiting", disk.failure)] and group.writes == {}
