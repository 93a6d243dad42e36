"""The node's own state, kept apart from the client keyspace: the ``system`` LevelDB of a data dir, one
key prefix per part, so nothing of the node's own can show through the client API or a range scan.

    clock/   the hybrid clock's persisted floor (:class:`ClockFloor`)
    hints/   hinted handoff's per-target logs (kvnode.replica.hints.HintStore)

A new part (identity, membership, repair state) is one more prefix in ``PREFIXES`` and one more attribute
of :class:`SystemDb`, built from its own ``prefixed_db``; no part sees another's keys.

>>> import tempfile
>>> tmp = tempfile.TemporaryDirectory()
>>> system = SystemDb.open(Path(tmp.name) / "node")
>>> system.clock_floor.persist(1_700_000_000_000_000)
>>> system.clock_floor.load()
1700000000000000
>>> system.close(); tmp.cleanup()
"""

from __future__ import annotations

from pathlib import Path

import plyvel

from kvnode.storage import open_leveldb, storage_error

__all__ = ["PREFIXES", "ClockFloor", "SystemDb"]

CLOCK_PREFIX = b"clock/"
HINTS_PREFIX = b"hints/"
PREFIXES = (CLOCK_PREFIX, HINTS_PREFIX)  # every part's; none may start another's


class ClockFloor:
    """The floor the clock persisted (kvnode.clock's lease); a restarted node's clock starts from it."""

    _KEY = b"floor"

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part

    def load(self) -> int:
        """The last floor persisted, 0 on a new data dir."""
        raw: bytes | None = self._part.get(self._KEY)
        return int.from_bytes(raw, "big") if raw else 0

    def persist(self, floor: int) -> None:
        """Raises StorageError (StorageFull for a full disk): the clock then hands out no timestamp."""
        # Fsynced whatever --fsync says (a floor that did not survive would let timestamps repeat), and
        # cheap enough: the clock persists once per lease (kvnode.clock.FLOOR_LEASE_US).
        try:
            self._part.put(self._KEY, floor.to_bytes(8, "big"), sync=True)
        except plyvel.Error as error:
            raise storage_error(error) from error


class SystemDb:
    """The owner of the ``system`` LevelDB: it opens and closes it and hands each part its prefix."""

    def __init__(self, db: plyvel.DB) -> None:
        self._db = db
        self.clock_floor = ClockFloor(db.prefixed_db(CLOCK_PREFIX))
        self.hints: plyvel.DB = db.prefixed_db(HINTS_PREFIX)  # HintStore's, which keeps the format

    @classmethod
    def open(cls, data_dir: Path) -> SystemDb:
        """Raises kvnode.storage.StorageUnavailable when the data dir cannot be opened."""
        return cls(open_leveldb(data_dir, "system"))

    def close(self) -> None:
        self._db.close()
