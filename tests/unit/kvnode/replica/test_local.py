"""kvnode.replica.local: this node's storage answers as a replica: reads and writes through the one store
path, each failure as the replica error a peer's would be, reads refused while its data is not whole, and
every call counted by its outcome."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plyvel
import pytest

from kvnode.clocks.hybrid import wall_clock_us
from kvnode.replica.errors import ReplicaDiskFull, ReplicaNotReady, ReplicaRejected, ReplicaSkewRefused
from kvnode.replica.local import LocalReplica
from kvnode.replica.readiness import NodeState
from kvnode.storage.keyspace import Storage, StorageError, StorageFull
from kvnode.storage.records import Record
from tests.harness import group_written
from tests.replicas import unjudged_fence

URL = "http://a:1"


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    opened = Storage.open(tmp_path / "node", fsync=False)
    yield opened
    opened.close()


async def test_a_write_stores_a_newer_version_and_names_a_newer_one_held(storage: Storage) -> None:
    local = LocalReplica(URL, storage, unjudged_fence())
    assert await local.write(b"k", Record(10, False, b"new")) is None
    assert await local.write(b"k", Record(9, False, b"old")) == 10
    assert await local.read(b"k") == Record(10, False, b"new")
    assert await local.read(b"absent") is None
    assert local.meter.calls == {("write", "ok"): 2, ("read", "ok"): 2}


async def test_a_write_beyond_the_skew_is_refused_and_not_stored(storage: Storage) -> None:
    local = LocalReplica(URL, storage, unjudged_fence())
    ahead = wall_clock_us()() + 3_600_000_000
    with pytest.raises(ReplicaSkewRefused, match=f"^{URL}: record stamped {ahead} is beyond"):
        await local.write(b"k", Record(ahead, False, b"from the future"))
    assert storage.read(b"k") is None
    assert local.meter.calls == {("write", "skew_refused"): 1}


async def test_reads_are_refused_while_the_data_is_not_whole_but_writes_are_taken(storage: Storage) -> None:
    state = NodeState.REBUILDING
    local = LocalReplica(URL, storage, unjudged_fence(), lambda: state)
    assert await local.write(b"k", Record(1, False, b"v")) is None
    with pytest.raises(ReplicaNotReady, match=f"^{URL} is rebuilding"):
        await local.read(b"k")
    state = NodeState.SERVING
    assert await local.read(b"k") == Record(1, False, b"v")
    assert local.meter.calls == {("write", "ok"): 1, ("read", "not_ready"): 1, ("read", "ok"): 1}


async def test_a_full_disk_and_a_storage_failure_are_the_replica_errors_a_peer_sends(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalReplica(URL, storage, unjudged_fence())
    for raised, error, outcome in [
        (StorageFull("disk full: No space left on device"), ReplicaDiskFull, "disk_full"),
        (StorageError("IO error"), ReplicaRejected, "rejected"),
    ]:

        def fail(raised: StorageError = raised) -> None:
            raise raised

        monkeypatch.setattr(storage, "_writable", fail)  # how a group commit's write first fails
        future = local.write(b"k", Record(1, False, b"v"))
        with pytest.raises(error) as failed:
            await future
        assert type(failed.value) is error and str(failed.value) == f"{URL}: {raised}"
        assert local.meter.calls["write", outcome] == 1
    assert storage.read(b"k") is None


async def test_a_write_and_a_read_of_it_are_answered_only_once_its_group_commit_stored_it(
    storage: Storage,
) -> None:
    local = LocalReplica(URL, storage, unjudged_fence())
    storage.apply(b"stored", Record(1, False, b"s"))
    writes = [local.write(b"k", Record(2, False, b"v")), local.write(b"k", Record(1, False, b"older"))]
    read = local.read(b"k")
    assert not (writes[0].done() or writes[1].done() or read.done())
    assert local.read(b"stored").done()  # nothing of it pending: answered at once
    assert local.write(b"stored", Record(0, False, b"lost")).done()  # lost to the stored version
    await group_written(storage.when_written)
    assert [writes[0].result(), writes[1].result(), read.result()] == [None, 2, Record(2, False, b"v")]
    assert storage.raw(b"k") is not None


async def test_a_corrupt_stored_record_is_a_rejected_read(tmp_path: Path) -> None:
    (tmp_path / "node").mkdir()
    db = plyvel.DB(str(tmp_path / "node" / "records"), create_if_missing=True)
    db.put(b"k", b"\x01\x02\x03")  # shorter than a record's header
    db.close()
    storage = Storage.open(tmp_path / "node", fsync=False)
    try:
        local = LocalReplica(URL, storage, unjudged_fence())
        with pytest.raises(ReplicaRejected, match=f"^{URL}: "):
            await local.read(b"k")
        assert local.meter.calls == {("read", "rejected"): 1}
    finally:
        storage.close()
