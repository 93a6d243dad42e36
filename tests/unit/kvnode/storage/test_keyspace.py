"""kvnode.storage.keyspace on real LevelDB in pytest's temporary directories."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import plyvel
import pytest

from kvnode.storage.keyspace import Storage, StorageFull, StorageUnavailable
from kvnode.storage.records import CorruptRecord, Record, encode
from tests.drivers import FailingWrites
from tests.harness import group_written

Change = tuple[bytes, bytes | None, bytes | None]


@pytest.fixture
def changes() -> list[Change]:
    """What the store's change listener was told, (key, old, new), in order."""
    return []


@pytest.fixture
def store(tmp_path: Path, changes: list[Change]) -> Iterator[Storage]:
    storage = Storage.open(tmp_path / "db", fsync=False, on_change=lambda *change: changes.append(change))
    try:
        yield storage
    finally:
        storage.close()


def test_open_creates_a_missing_data_dir(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "node"
    storage = Storage.open(path, fsync=False)
    try:
        assert path.is_dir()
        assert storage.read(b"k") is None
    finally:
        storage.close()


def test_read_of_an_absent_key_is_none(store: Storage) -> None:
    assert store.read(b"nothing") is None
    assert store.read(b"") is None


def test_apply_stores_the_first_version(store: Storage) -> None:
    record = Record.put(10, b"v1")
    assert store.apply(b"k", record) == record
    assert store.read(b"k") == record


def test_apply_if_newer(store: Storage) -> None:
    store.apply(b"k", Record.put(10, b"v10"))
    # an older write loses and the stored version is returned
    assert store.apply(b"k", Record.put(9, b"v9")) == Record.put(10, b"v10")
    assert store.read(b"k") == Record.put(10, b"v10")
    # a newer write wins
    assert store.apply(b"k", Record.put(11, b"v11")) == Record.put(11, b"v11")
    assert store.read(b"k") == Record.put(11, b"v11")
    # the same version again is an idempotent no-op
    assert store.apply(b"k", Record.put(11, b"v11")) == Record.put(11, b"v11")
    assert store.read(b"k") == Record.put(11, b"v11")


def test_apply_breaks_ties_like_the_record_order(store: Storage) -> None:
    store.apply(b"k", Record.put(5, b"b"))
    assert store.apply(b"k", Record.put(5, b"a")) == Record.put(5, b"b")  # smaller bytes lose a tie
    assert store.apply(b"k", Record.put(5, b"c")) == Record.put(5, b"c")  # greater bytes win it
    assert store.apply(b"k", Record.delete(5)) == Record.delete(5)  # a tombstone wins a tie
    assert store.apply(b"k", Record.put(5, b"\xff" * 10)) == Record.delete(5)
    assert store.read(b"k") == Record.delete(5)


def test_tombstones(store: Storage) -> None:
    store.apply(b"k", Record.put(1, b"v"))
    assert store.apply(b"k", Record.delete(2)) == Record.delete(2)
    assert store.read(b"k") == Record.delete(2)  # read returns the tombstone itself
    assert store.apply(b"k", Record.put(1, b"late")) == Record.delete(2)  # an older value stays deleted
    assert store.apply(b"k", Record.put(3, b"again")) == Record.put(3, b"again")  # re-created
    assert store.read(b"k") == Record.put(3, b"again")
    # a tombstone for a key never written is stored too (it must win over older writes arriving later)
    assert store.apply(b"never", Record.delete(7)) == Record.delete(7)
    assert store.apply(b"never", Record.put(6, b"older")) == Record.delete(7)


def test_keys_and_values_keep_every_byte(store: Storage) -> None:
    all_bytes = bytes(range(256))
    for byte in range(256):
        store.apply(bytes([byte]), Record.put(byte + 1, all_bytes[byte:] + all_bytes[:byte]))
    store.apply(b"", Record.put(1, b"empty key"))
    store.apply(b"empty", Record.put(1, b""))
    for byte in range(256):
        assert store.read(bytes([byte])) == Record.put(byte + 1, all_bytes[byte:] + all_bytes[:byte])
    assert store.read(b"") == Record.put(1, b"empty key")
    assert store.read(b"empty") == Record.put(1, b"")


def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "db"
    storage = Storage.open(path, fsync=True)
    storage.apply(b"a", Record.put(1, b"one"))
    storage.apply(b"b", Record.put(1, b"two"))
    storage.apply(b"b", Record.delete(2))
    storage.close()
    storage = Storage.open(path, fsync=False)
    try:
        assert storage.read(b"a") == Record.put(1, b"one")
        assert storage.read(b"b") == Record.delete(2)
        assert list(storage.scan_live(b"\x00", None, now=0)) == [(b"a", b"one")]
    finally:
        storage.close()


# --- scan_live ------------------------------------------------------------------------------------


def test_scan_of_an_empty_store(store: Storage) -> None:
    assert list(store.scan_live(b"\x00", None, now=0)) == []
    assert list(store.scan_live(b"a", b"z", now=0)) == []


def test_scan_in_key_byte_order(store: Storage) -> None:
    keys = [b"b", b"a", b"ab", b"a\x00", b"\xff", b"\x00", b"B", "é".encode(), b"z", b"\x7f", b"\x80"]
    shuffled = keys[:]
    random.Random(3).shuffle(shuffled)
    for timestamp, key in enumerate(shuffled, 1):
        store.apply(key, Record.put(timestamp, b"v-" + key))
    assert list(store.scan_live(b"\x00", None, now=0)) == [(key, b"v-" + key) for key in sorted(keys)]
    # "z" (0x7a) sorts before "é" (0xc3 0xa9) in UTF-8 byte order
    scanned = [key for key, _ in store.scan_live(b"y", None, now=0)]
    assert scanned == [b"z", b"\x7f", b"\x80", "é".encode(), b"\xff"]


def test_scan_bounds_are_start_inclusive_end_exclusive(store: Storage) -> None:
    for key in (b"a", b"b", b"ba", b"c", b"d"):
        store.apply(key, Record.put(1, key.upper()))
    assert list(store.scan_live(b"b", b"d", now=0)) == [(b"b", b"B"), (b"ba", b"BA"), (b"c", b"C")]
    assert list(store.scan_live(b"b", b"c", now=0)) == [(b"b", b"B"), (b"ba", b"BA")]
    assert list(store.scan_live(b"bb", None, now=0)) == [(b"c", b"C"), (b"d", b"D")]
    assert list(store.scan_live(b"a", b"a\x00", now=0)) == [(b"a", b"A")]
    assert list(store.scan_live(b"e", None, now=0)) == []
    assert list(store.scan_live(b"b", b"b", now=0)) == []  # end == start: empty
    assert list(store.scan_live(b"c", b"b", now=0)) == []  # end < start: empty


def test_scan_skips_tombstones(store: Storage) -> None:
    for key in (b"a", b"b", b"c", b"d"):
        store.apply(key, Record.put(1, key))
    store.apply(b"b", Record.delete(2))
    store.apply(b"d", Record.delete(2))
    store.apply(b"e", Record.delete(2))  # a tombstone for a key that never had a value
    assert list(store.scan_live(b"a", None, now=0)) == [(b"a", b"a"), (b"c", b"c")]
    store.apply(b"b", Record.put(3, b"back"))
    assert list(store.scan_live(b"a", None, now=0)) == [(b"a", b"a"), (b"b", b"back"), (b"c", b"c")]


def test_scan_skips_versions_expired_at_its_time(store: Storage) -> None:
    store.apply(b"a", Record.put(10, b"a", ttl_us=5))  # expires at 15
    store.apply(b"b", Record.put(10, b"b"))
    store.apply(b"b", Record.put(11, b"b-ttl", ttl_us=5))  # newer, so it hides "b" once expired too
    assert list(store.scan_live(b"a", None, now=14)) == [(b"a", b"a"), (b"b", b"b-ttl")]
    assert list(store.scan_live(b"a", None, now=15)) == [(b"b", b"b-ttl")]
    assert list(store.scan_live(b"a", None, now=16)) == []
    store.apply(b"a", Record.put(20, b"again"))  # a later write without a TTL is permanent
    assert list(store.scan_live(b"a", None, now=2**63)) == [(b"a", b"again")]


def test_scan_is_lazy_and_reads_one_snapshot(store: Storage) -> None:
    for key in (b"a", b"b", b"c"):
        store.apply(key, Record.put(1, key))
    scan = store.scan_live(b"a", None, now=0)
    assert next(scan) == (b"a", b"a")
    store.apply(b"bb", Record.put(2, b"new"))  # written after the scan started
    store.apply(b"c", Record.delete(2))
    assert list(scan) == [(b"b", b"b"), (b"c", b"c")]


# --- corrupt records --------------------------------------------------------------------------------


GARBAGE = {
    b"short": b"\x01\x02\x03",  # shorter than the header
    b"flags": b"\x00" * 8 + b"\x80" + b"value",  # unknown flag bits
    b"tombvalue": encode(Record.delete(4)) + b"x",  # a tombstone that carries a value
}


def _write_raw(path: Path, items: dict[bytes, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = plyvel.DB(str(path), create_if_missing=True)
    try:
        for key, raw in items.items():
            db.put(key, raw)
    finally:
        db.close()


def test_corrupt_record_fails_only_its_own_key(tmp_path: Path) -> None:
    path = tmp_path / "db"
    storage = Storage.open(path, fsync=False)
    for key in (b"a", b"m", b"z", *GARBAGE):
        storage.apply(key, Record.put(1, b"good-" + key))
    storage.close()
    _write_raw(path / "records", GARBAGE)

    storage = Storage.open(path, fsync=False)
    try:
        for key in GARBAGE:
            with pytest.raises(CorruptRecord):
                storage.read(key)
            with pytest.raises(CorruptRecord):
                storage.read_encoded(key)  # passed on unchanged to a peer, so checked all the same
        for key in (b"a", b"m", b"z"):
            assert storage.read(key) == Record.put(1, b"good-" + key)
            assert storage.read_encoded(key) == encode(Record.put(1, b"good-" + key))
        # scans skip the corrupt records and go on past them
        assert list(storage.scan_live(b"\x00", None, now=0)) == [
            (b"a", b"good-a"),
            (b"m", b"good-m"),
            (b"z", b"good-z"),
        ]
        assert list(storage.scan_live(b"flags", b"tombvalue\x00", now=0)) == [(b"m", b"good-m")]
    finally:
        storage.close()


def test_a_write_heals_a_corrupt_record(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _write_raw(path / "records", GARBAGE)
    storage = Storage.open(path, fsync=False)
    try:
        # any version wins over unreadable bytes, even the oldest timestamp
        assert storage.apply(b"short", Record.put(0, b"healed")) == Record.put(0, b"healed")
        assert storage.apply(b"flags", Record.delete(5)) == Record.delete(5)
        assert storage.read(b"short") == Record.put(0, b"healed")
        assert storage.read(b"flags") == Record.delete(5)
        with pytest.raises(CorruptRecord):
            storage.read(b"tombvalue")  # still corrupt: not written
        assert list(storage.scan_live(b"\x00", None, now=0)) == [(b"short", b"healed")]
        # once healed, the usual rules apply again
        assert storage.apply(b"short", Record.put(0, b"a")) == Record.put(0, b"healed")
    finally:
        storage.close()
    storage = Storage.open(path, fsync=False)
    try:
        assert storage.read(b"short") == Record.put(0, b"healed")  # the healed version is on disk
    finally:
        storage.close()


# --- unavailable data dirs ----------------------------------------------------------------------------


def test_a_regular_file_is_not_a_data_dir(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"not a database")
    with pytest.raises(StorageUnavailable):
        Storage.open(path, fsync=False)
    with pytest.raises(StorageUnavailable):
        Storage.open(path / "below", fsync=False)
    assert path.read_bytes() == b"not a database"


def test_a_data_dir_open_in_another_storage_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "db"
    first = Storage.open(path, fsync=False)
    try:
        first.apply(b"k", Record.put(1, b"v"))
        with pytest.raises(StorageUnavailable):
            Storage.open(path, fsync=False)
        assert first.read(b"k") == Record.put(1, b"v")  # the first store is unharmed
    finally:
        first.close()
    second = Storage.open(path, fsync=False)  # free again once closed
    try:
        assert second.read(b"k") == Record.put(1, b"v")
    finally:
        second.close()


async def test_an_offer_stores_nothing_before_its_group_commit_and_reads_see_its_writes(
    store: Storage, changes: list[Change]
) -> None:
    store.apply(b"old", Record.put(5, b"stored"))
    changes.clear()
    assert store.offer(b"new", Record.put(1, b"a")) == Record.put(1, b"a")
    assert store.offer(b"new", Record.put(2, b"b")) == Record.put(2, b"b")  # a later version in the group
    assert store.offer(b"new", Record.put(1, b"c")) == Record.put(2, b"b")  # loses to the pending one
    assert store.offer(b"old", Record.put(4, b"older")) == Record.put(5, b"stored")  # loses to the store
    assert store.read_encoded(b"new") == encode(Record.put(2, b"b"))
    assert store.read(b"new") == Record.put(2, b"b") and store.is_pending(b"new")
    assert store.read_encoded(b"old") == encode(Record.put(5, b"stored")) and not store.is_pending(b"old")
    assert store.raw(b"new") is None and changes == []  # not stored, and no listener told, yet
    await group_written(store.when_written)
    assert not store.is_pending(b"new")
    assert store.raw(b"new") == encode(Record.put(2, b"b"))
    assert changes == [(b"new", None, encode(Record.put(2, b"b")))]


async def test_a_failed_group_commit_fails_every_waiter_and_stores_none_of_it(store: Storage) -> None:
    store.apply(b"held", Record.put(1, b"stored"))
    store._db = FailingWrites(store._db)
    told: list[Exception | None] = []
    store.offer(b"held", Record.put(2, b"new"))
    store.when_written(told.append)
    store.offer(b"other", Record.put(2, b"new"))
    store.when_written(told.append)
    with pytest.raises(StorageFull, match=r"^disk full: "):
        await group_written(store.when_written)
    assert len(told) == 2 and all(isinstance(failure, StorageFull) for failure in told)
    assert store.read(b"held") == Record.put(1, b"stored") and store.read(b"other") is None


class CountedWrites:
    """A LevelDB that counts its writes, and fails those after the first ``good`` (None: none fails)."""

    def __init__(self, db: plyvel.DB, good: int | None = None) -> None:
        self._db, self._good = db, good
        self.writes = 0

    def write_batch(self, **options: object) -> object:
        self.writes += 1
        if self._good is not None and self.writes > self._good:
            raise plyvel.IOError(b"IO error: No space left on device")
        return self._db.write_batch(**options)

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


async def test_large_values_are_stored_one_to_a_write_and_small_ones_together(store: Storage) -> None:
    """LevelDB's memtable keeps the last write's values until the next write, so no write carries more
    than a MiB but for a single larger value (the memory a burst leaves: tests/cluster/test_limits.py)."""
    counted = CountedWrites(store._db)
    store._db = counted
    for index in range(3):
        store.offer(b"large-%d" % index, Record.put(1, b"x" * (1 << 20)))
    for index in range(100):
        store.offer(b"small-%d" % index, Record.put(1, b"x" * 100))
    await group_written(store.when_written)
    assert counted.writes == 4  # one per large value; the small ones fill the last
    assert all(store.raw(b"large-%d" % index) is not None for index in range(3))
    assert all(store.raw(b"small-%d" % index) is not None for index in range(100))


async def test_a_failed_write_of_a_large_group_fails_every_waiter_of_it(
    store: Storage, changes: list[Change]
) -> None:
    store._db = CountedWrites(store._db, good=1)
    told: list[Exception | None] = []
    for index in range(2):
        store.offer(b"large-%d" % index, Record.put(1, b"x" * (1 << 20)))
        store.when_written(told.append)
    with pytest.raises(StorageFull):
        await group_written(store.when_written)
    assert len(told) == 2 and all(isinstance(failure, StorageFull) for failure in told)
    # The first was stored (as after a lost acknowledgement), and anti-entropy's summaries told of it;
    # the second was not.
    assert store.raw(b"large-0") is not None and store.raw(b"large-1") is None
    assert [key for key, _, _ in changes] == [b"large-0"]


async def test_a_write_made_at_once_stores_the_pending_ones_with_it(store: Storage) -> None:
    told: list[Exception | None] = []
    store.offer(b"pending", Record.put(1, b"p"))
    store.when_written(told.append)
    store.apply(b"at once", Record.put(1, b"now"))
    assert told == [None]
    assert store.raw(b"pending") == encode(Record.put(1, b"p"))
    assert store.raw(b"at once") == encode(Record.put(1, b"now"))
    await group_written(store.when_written)  # the scheduled commit finds nothing left to write


async def test_drop_keeps_a_key_whose_newer_version_is_pending(store: Storage) -> None:
    store.apply(b"k", Record.delete(1))
    seen = store.read_chunk(b"", 10)
    store.offer(b"k", Record.put(2, b"pending"))
    assert store.drop(seen) == []
    await group_written(store.when_written)
    assert store.read(b"k") == Record.put(2, b"pending")


def test_drop_deletes_only_keys_still_holding_that_version_and_tells_its_listener(
    store: Storage, changes: list[Change]
) -> None:
    for key in (b"a", b"b", b"c"):
        store.apply(key, Record.delete(1))
    seen = store.read_chunk(b"", 10)
    assert [key for key, _ in seen] == [b"a", b"b", b"c"]
    store.apply(b"b", Record.put(2, b"written since"))
    changes.clear()
    assert store.drop(seen) == [b"a", b"c"]
    assert store.read(b"a") is None and store.read(b"c") is None
    assert store.read(b"b") == Record.put(2, b"written since")
    tombstone = encode(Record.delete(1))
    assert changes == [(b"a", tombstone, None), (b"c", tombstone, None)]


def test_read_chunk_reads_from_its_start_up_to_its_limit(store: Storage) -> None:
    for key in (b"a", b"b", b"c", b"d"):
        store.apply(key, Record.put(1, key))
    assert [key for key, _ in store.read_chunk(b"b", 2)] == [b"b", b"c"]
    assert store.read_chunk(b"e", 2) == []


def test_a_refused_write_marks_the_store_until_made_good_across_a_restart(tmp_path: Path) -> None:
    """The coordinator's own copy refused for a full disk is no hint: the mark is what brings it back
    (kvnode.healing.missed_writes), so it outlives a restart."""
    now = [0.0]
    store = Storage.open(tmp_path / "db", fsync=False, now_s=lambda: now[0])
    assert (store.missed, store.refused.is_set(), store.writable()) == (False, False, True)
    store._db = FailingWrites(store._db)
    for _ in range(2):  # the first refused by LevelDB, the next at once, before the database is reopened
        with pytest.raises(StorageFull):
            store.apply(b"refused", Record.put(1, b"v"))
    assert (store.missed, store.refusals, store.refused.is_set(), store.writable()) == (True, 2, True, False)
    store.close()
    store = Storage.open(tmp_path / "db", fsync=False, now_s=lambda: now[0])
    try:
        assert (store.missed, store.refusals) == (True, 0)
        store._db = FailingWrites(store._db)
        with pytest.raises(StorageFull):
            store.apply(b"refused", Record.put(1, b"v"))
        assert not store.writable()
        now[0] = 2.0  # past the pause, and this disk has room: the database opens again
        assert store.writable()
        assert store.made_good(0) is False  # a repair counted before the last refusal does not clear it
        assert store.made_good(1) is True and not store.missed
        store.apply(b"stored", Record.put(1, b"v"))
    finally:
        store.close()
    store = Storage.open(tmp_path / "db", fsync=False)
    assert not store.missed
    store.close()
