"""Storage: one versioned record per key in LevelDB (through plyvel), written only if newer.

A data dir holds two LevelDB databases: ``records``, the client keyspace, here; and ``system``, the node's
own state (kvnode.storage.system_db). Beside them, ``records.missed`` marks writes this store refused (a
full disk, an I/O error) that no repair has made good yet (kvnode.healing.missed_writes).

>>> import tempfile
>>> tmp = tempfile.TemporaryDirectory()
>>> store = Storage.open(Path(tmp.name) / "node", fsync=False)
>>> store.apply(b"k", Record.put(10, b"v1"))
Record(timestamp=10, tombstone=False, value=b'v1', expires=0, copies=0)
>>> store.apply(b"k", Record.put(9, b"old")).value   # an older write loses
b'v1'
>>> store.close(); tmp.cleanup()
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import plyvel

from kvnode.storage.group_commit import GroupCommit, Pending, Waiter, runs
from kvnode.storage.records import CorruptRecord, Record, check, decode

__all__ = [
    "DISK_FULL",
    "ChangeListener",
    "Storage",
    "StorageError",
    "StorageFull",
    "StorageUnavailable",
    "open_leveldb",
    "storage_error",
]

log = logging.getLogger(__name__)

ChangeListener = Callable[[bytes, bytes | None, bytes | None], None]


class StorageError(Exception):
    """LevelDB refused an operation (I/O error, disk full)."""


class StorageUnavailable(StorageError):
    """The data directory cannot be opened as this node's store."""


# How a StorageFull's message starts; a peer's refusal of a write carries it, so the coordinator knows.
DISK_FULL = "disk full"


class StorageFull(StorageError):
    """The data dir's disk is full: nothing more is written until space is freed (reads still work)."""


_NO_SPACE = "No space left on device"  # LevelDB's message for ENOSPC (strerror)
# After a write fails, the database is opened again before the next write (see Storage.apply), once the
# disk has this much free: LevelDB's recovery writes a table of the log's records (its write buffer, 4
# MiB by default) and a new log. Tried at most every _RETRY_S.
_REOPEN_FREE_BYTES = 8 * 1024 * 1024
# LevelDB's own bound on the writes it groups (DBImpl::BuildBatchGroup): its memtable keeps the last
# write's values until the next one, so a write of many large values would hold them all (docs/limits.md).
_WRITE_BYTES = 1024 * 1024
_RETRY_S = 1.0
# The missed-writes mark: one byte, written in place. Its block is allocated when the mark is made, so
# setting it needs no new one: it can be set on a full disk.
_MISSED = "records.missed"


class Storage:
    """The client keyspace. A write that fails (a full disk, an I/O error) leaves LevelDB's log with a
    torn record and, for a full disk, LevelDB refusing every later write; so the next write first opens
    the database again (its recovery drops the torn record), once the disk has room. Until then writes
    fail at once with the first failure, and reads go on from the open database.

    A refused write leaves this node without a version its other replicas took (a coordinator's own copy
    is no hint: the hints are on the same disk), so ``missed`` marks it, durably, until a repair with the
    peers has made the refused writes good (``made_good``)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        fsync: bool,
        on_change: ChangeListener | None = None,
        now_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._data_dir = data_dir
        self._now_s = now_s  # when a write failed, and when the database may be opened again
        self._db = open_leveldb(data_dir, _NAME)
        try:
            self._missed = _MissedMark(data_dir / _MISSED)
        except StorageUnavailable:
            self._db.close()
            raise
        self.fsync = fsync
        # Told of every stored change of a key's version, (key, old, new) as encoded records (None:
        # absent), once it is stored: anti-entropy's summaries follow it (kvnode.healing.upkeep).
        self._on_change = on_change or _ignore_change
        self.refused = asyncio.Event()  # set at each write refused, for the repair that makes it good
        self.refusals = 0  # writes refused since start
        self._failed: StorageError | None = None  # the write failure the database must be reopened after
        self._next_reopen = 0.0
        self._group = GroupCommit(self._write_all, StorageError)  # writes not yet stored

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        fsync: bool,
        on_change: ChangeListener | None = None,
        now_s: Callable[[], float] = time.monotonic,
    ) -> Storage:
        """The keyspace in ``path``; ``on_change`` is told of every change stored (see __init__)."""
        return cls(path, fsync=fsync, on_change=on_change, now_s=now_s)

    def close(self) -> None:
        """Store the pending writes first (a failure is logged, and told to their waiters)."""
        with contextlib.suppress(StorageError):
            self._group.commit()
        self._db.close()
        self._missed.close()

    @property
    def missed(self) -> bool:
        """Whether this store refused writes (since start or before a restart) not yet made good."""
        return self._missed.set

    def writable(self) -> bool:
        """Whether writes may succeed now: none failed, or the database opened again since (it is, once
        the disk has room)."""
        try:
            self._writable()
        except StorageError:
            return False
        return True

    def made_good(self, refusals: int) -> bool:
        """The writes refused until ``refusals`` were counted are made good (a repair that began then
        completed with every peer): clear the mark unless more were refused since. Whether it is clear."""
        if refusals == self.refusals and self._missed.set:
            self._missed.write(False)
            log.warning("the writes %s refused have been made good by a repair", self._data_dir)
        return not self._missed.set

    def read(self, key: bytes) -> Record | None:
        """The version of key, pending or stored, tombstones included; raises CorruptRecord for unreadable
        bytes. A pending version is acknowledged only once written (``is_pending``, ``when_written``)."""
        pending = self._group.writes.get(key)
        if pending is not None:
            return pending.record
        raw = self._get(key)
        return None if raw is None else decode(raw)

    def read_encoded(self, key: bytes) -> bytes | None:
        """The version of key, pending or stored, as its record bytes (records.encode's), checked, not
        decoded: a replica answers a read with them. Raises CorruptRecord for unreadable bytes."""
        pending = self._group.writes.get(key)
        if pending is not None:
            return pending.encoded
        raw = self._get(key)
        return None if raw is None else check(raw)

    def apply(self, key: bytes, record: Record, encoded: bytes | None = None) -> Record:
        """Store record unless the version held (pending or stored) wins over it, with any pending writes,
        before it returns; the version held afterwards. A replica's writes are offered (``offer``).

        Read and write run with no await between them, so on the node's single event loop the pair is
        atomic. A corrupt stored record loses to any write: the new version heals it.
        """
        held = self._group.offer(key, record, self._current, encoded)
        self._group.commit()
        return held

    def commit(self) -> None:
        """Store the pending writes now, by one write, and tell their waiters; raises its StorageError."""
        self._group.commit()

    def offer(self, key: bytes, record: Record, encoded: bytes | None = None) -> Record:
        """``apply``, but the write joins this event-loop iteration's group commit
        (kvnode.storage.group_commit): an iteration's writes, a coordinator's own and its peers' calls,
        reach LevelDB by one write (one write(2)) at its end (docs/node-internals.md). Reads see it at
        once; nothing may acknowledge it before ``when_written`` says so, and nothing if the write fails."""
        return self._group.offer_soon(key, record, self._current, encoded)

    def is_pending(self, key: bytes) -> bool:
        """Whether a version of key waits for its group's commit (nothing may acknowledge it yet)."""
        return key in self._group.writes

    def when_written(self, waiter: Waiter) -> None:
        """Tell waiter once the pending writes are stored (None) or failed (their StorageError: then not
        all of them were stored); at once when none is pending."""
        self._group.wait(waiter)

    def _get(self, key: bytes) -> bytes | None:
        try:
            raw: bytes | None = self._db.get(key)
        except plyvel.Error as error:
            raise StorageError(_reason(error)) from error
        return raw

    def _current(self, key: bytes) -> tuple[Record | None, bytes | None]:
        """The stored version a write competes with, and its bytes; a corrupt one counts as no version
        (the write heals it)."""
        raw = self._get(key)
        if raw is None:
            return None, None
        try:
            return decode(raw), raw
        except CorruptRecord:
            log.warning("overwriting corrupt record for key %r", key)
            return None, raw

    def _write_all(self, writes: dict[bytes, Pending]) -> None:
        """Store ``writes``, a LevelDB write per run of _WRITE_BYTES, telling on_change of each run once
        it is stored. A failed write fails them all, though the runs before it were stored (as after a
        lost acknowledgement, a write told it failed may yet be held)."""
        try:
            self._writable()
        except StorageError:
            self._refused()
            raise
        for group in runs(writes, _WRITE_BYTES):
            try:
                # sync=False still hands the write to the OS before returning (LevelDB's log is written
                # with one write(2) per write): an acknowledged write survives kill -9. sync=True fsyncs.
                with self._db.write_batch(sync=self.fsync) as batch:
                    for key, pending in group:
                        batch.put(key, pending.encoded)
            except plyvel.Error as error:
                failure = self._write_failed(error)
                self._refused()
                raise failure from error
            for key, pending in group:
                self._on_change(key, pending.replaced, pending.encoded)

    def raw(self, key: bytes) -> bytes | None:
        """Key's stored bytes as they are, unchecked: what anti-entropy's summary digested."""
        return self._get(key)

    def keys_after(self, after: bytes, limit: int) -> list[bytes]:
        """Up to ``limit`` stored keys after ``after`` (b"": from the first), in key order."""
        try:
            with self._db.iterator(start=after, include_start=False, include_value=False) as keys:
                return list(itertools.islice(keys, limit))
        except plyvel.Error as error:
            raise StorageError(_reason(error)) from error

    def snapshot_records(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, encoded record) of every stored version, tombstones and corrupt ones included, in key
        order, from a snapshot taken when this is called (not at the first ``next``): what a summary
        rebuilt from a scan starts from, whatever is stored while it is read (kvnode.healing.upkeep)."""
        snapshot = self._db.snapshot()
        return _iterate(snapshot)

    def read_chunk(self, start: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` (key, encoded record) with key >= start, in key order, tombstones and corrupt
        records included: a scan in chunks, each from its own iterator, so that no snapshot outlives a
        chunk and keeps dropped records' space from being reclaimed (kvnode.healing.gc)."""
        try:
            with self._db.iterator(start=start) as records:
                return list(itertools.islice(records, limit))
        except plyvel.Error as error:
            raise StorageError(_reason(error)) from error

    def drop(self, versions: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
        """Delete each key of (key, encoded record) ``versions`` whose version is still that one, in one
        LevelDB write; the keys deleted. The checks and the write run with no await between them, so a
        version stored (or pending) since it was read is never lost; on_change is told (key, old, None)."""
        pending = self._group.writes
        dropped = [(key, raw) for key, raw in versions if key not in pending and self._get(key) == raw]
        if not dropped:
            return []
        self._writable()
        try:
            with self._db.write_batch(sync=self.fsync) as batch:
                for key, _ in dropped:
                    batch.delete(key)
        except plyvel.Error as error:
            raise self._write_failed(error) from error
        for key, raw in dropped:
            self._on_change(key, raw, None)
        return [key for key, _ in dropped]

    def compact(self, start: bytes, stop: bytes) -> None:
        """Reclaim the space of what was deleted with start <= key <= stop (LevelDB's compaction of the
        range: a deleted key's old versions stay on disk until then). Blocking, and safe from another
        thread."""
        try:
            self._db.compact_range(start=start, stop=stop)
        except plyvel.Error as error:
            raise self._write_failed(error) from error

    def _write_failed(self, error: plyvel.Error) -> StorageError:
        failure = storage_error(error)
        if self._failed is None:
            log.error("writes to %s fail until it is opened again: %s", self._data_dir, failure)
        self._failed = failure
        self._next_reopen = self._now_s() + _RETRY_S
        return failure

    def _refused(self) -> None:
        self.refusals += 1
        if not self._missed.set:
            self._missed.write(True)
        self.refused.set()

    def _writable(self) -> None:
        """Open the database again after a failed write, if the disk has room; else raise that failure."""
        failed = self._failed
        if failed is None:
            return
        now = self._now_s()
        if now < self._next_reopen:
            raise failed
        if _free_bytes(self._data_dir) < _REOPEN_FREE_BYTES:
            self._next_reopen = now + _RETRY_S
            raise failed
        self._db.close()
        try:
            self._db = open_leveldb(self._data_dir, _NAME)
        except StorageUnavailable as error:
            # The disk filled again meanwhile: keep trying, as before (the database stays closed, so
            # reads fail too until it opens).
            self._next_reopen = now + _RETRY_S
            raise StorageError(str(error)) from error
        self._failed = None
        log.warning("%s is writable again", self._data_dir)

    def scan_live(self, start: bytes, stop: bytes | None, *, now: int) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of live records with start <= key < stop in key byte order, from one snapshot.

        Tombstones and versions expired at ``now`` are skipped, and so are corrupt records (logged), so
        one bad record cannot end a scan.
        """
        with self._db.iterator(start=start, stop=stop) as records:
            for key, raw in records:
                try:
                    record = decode(raw)
                except CorruptRecord as error:
                    log.warning("range scan skips corrupt record for key %r: %s", key, error)
                    continue
                if not record.absent_at(now):
                    yield key, record.value


def _iterate(snapshot: Any) -> Iterator[tuple[bytes, bytes]]:
    with snapshot.iterator() as records:
        yield from records


def _ignore_change(key: bytes, old: bytes | None, new: bytes | None) -> None:
    """Storage's change listener when it is given none."""


class _MissedMark:
    """The durable mark of writes refused and not yet made good (``records.missed``: b"1" or b"0")."""

    def __init__(self, path: Path) -> None:
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            if os.fstat(self._fd).st_size == 0:
                os.pwrite(self._fd, b"0", 0)
                os.fsync(self._fd)
            self.set = os.pread(self._fd, 1, 0) == b"1"
        except OSError as error:
            reason = "the disk is full" if error.errno == errno.ENOSPC else error.strerror or str(error)
            raise StorageUnavailable(f"cannot open data dir {path.parent}: {reason}") from error
        if self.set:
            log.warning("%s: writes refused before this start are to be made good by a repair", path)

    def write(self, missed: bool) -> None:
        self.set = missed  # in memory first: the repair is due even if the mark cannot be written
        try:
            os.pwrite(self._fd, b"1" if missed else b"0", 0)
            os.fsync(self._fd)
        except OSError as error:
            log.error("cannot write %s: %s", _MISSED, error.strerror or error)

    def close(self) -> None:
        os.close(self._fd)


_NAME = "records"


def _free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def storage_error(error: plyvel.Error) -> StorageError:
    """LevelDB's error as ours: StorageFull for a full disk."""
    reason = _reason(error)
    return StorageFull(f"{DISK_FULL}: {reason}") if _NO_SPACE in reason else StorageError(reason)


def open_leveldb(data_dir: Path, name: str) -> plyvel.DB:
    """The LevelDB ``name`` in ``data_dir``, both made if missing; StorageUnavailable if it cannot be had
    (another process holds it, the path is a file, no permission)."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return plyvel.DB(str(data_dir / name), create_if_missing=True)
    except plyvel.Error as error:  # before OSError: plyvel's IOError is one too
        reason = _reason(error)
        if _NO_SPACE in reason:
            reason = f"the disk is full ({reason})"
        raise StorageUnavailable(f"cannot open data dir {data_dir}: {reason}") from error
    except OSError as error:
        reason = "the disk is full" if error.errno == errno.ENOSPC else error.strerror or str(error)
        raise StorageUnavailable(f"cannot open data dir {data_dir}: {reason}") from error


def _reason(error: plyvel.Error) -> str:
    """plyvel carries LevelDB's message as bytes; make it a readable line."""
    message = error.args[0] if error.args else error
    return message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
