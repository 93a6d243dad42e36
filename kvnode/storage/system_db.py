"""The node's own state, kept apart from the client keyspace: the ``system`` LevelDB of a data dir, one
key prefix per part, so nothing of the node's own can show through the client API or a range scan.

    clock/    the hybrid clock's persisted floor (:class:`ClockFloor`)
    hints/    hinted handoff's per-target logs (kvnode.replica.hints.HintStore)
    summary/  anti-entropy's summaries as of the last clean stop (:class:`SavedSummaries`)
    repair/   when each peer last completed a repair with this node (:class:`RepairMarks`)
    identity/ who this node is, and whether its data is whole yet (:class:`NodeIdentity`)
    peers/    the identity each peer had when this node last met it (:class:`PeerIdentities`)
    members/  the cluster's identity and membership (:class:`StoredMembership`)
    paxos/    each key's Paxos acceptor state, as kvnode.paxos encoded it (:class:`PaxosStates`)

A new part (GC watermarks, say) is one more prefix in ``PREFIXES`` and one more attribute
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

import secrets
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import plyvel

from kvnode.storage.keyspace import StorageUnavailable, open_leveldb, storage_error
from kvnode.topology.membership import Membership

__all__ = [
    "DATA_FORMAT",
    "FORMAT_PREFIX",
    "PREFIXES",
    "ClockFloor",
    "DataFormat",
    "NodeIdentity",
    "PaxosStates",
    "PeerIdentities",
    "RepairMarks",
    "SavedSummaries",
    "StoredMembership",
    "SystemDb",
]

CLOCK_PREFIX = b"clock/"
HINTS_PREFIX = b"hints/"
SUMMARY_PREFIX = b"summary/"
REPAIR_PREFIX = b"repair/"
IDENTITY_PREFIX = b"identity/"
PEERS_PREFIX = b"peers/"
MEMBERS_PREFIX = b"members/"
FORMAT_PREFIX = b"format/"
PAXOS_PREFIX = b"paxos/"

# The layout of a data dir (its records and every system part) that this kvnode reads and writes. A change
# to any of them is a new format: this kvnode refuses a newer one, and a later one migrates an older one.
DATA_FORMAT = 1
# None may start another's.
PREFIXES = (
    CLOCK_PREFIX,
    HINTS_PREFIX,
    SUMMARY_PREFIX,
    REPAIR_PREFIX,
    IDENTITY_PREFIX,
    PEERS_PREFIX,
    MEMBERS_PREFIX,
    FORMAT_PREFIX,
    PAXOS_PREFIX,
)


class ClockFloor:
    """The floor the clock persisted (kvnode.clocks.hybrid's lease); a restarted node's clock starts from
    it."""

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
        # cheap enough: the clock persists once per lease (kvnode.clocks.hybrid.FLOOR_LEASE_US).
        try:
            self._part.put(self._KEY, floor.to_bytes(8, "big"), sync=True)
        except plyvel.Error as error:
            raise storage_error(error) from error


class SavedSummaries:
    """Anti-entropy's trees, saved at a clean stop and taken back (once) at the next start.

    Taking them deletes them first, durably: a node that crashes after that has none saved, so its next
    start rebuilds the trees from a scan instead of trusting trees that missed the writes since.

    >>> import tempfile
    >>> tmp = tempfile.TemporaryDirectory(); system = SystemDb.open(Path(tmp.name))
    >>> system.summaries.save(b"members", {"common": b"tree"})
    >>> system.summaries.take(b"members"), system.summaries.take(b"members")
    ({'common': b'tree'}, None)
    >>> system.close(); tmp.cleanup()
    """

    _STAMP = b"\x00stamp"  # sorts before every tree's name

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part

    def save(self, stamp: bytes, trees: Mapping[str, bytes]) -> None:
        """Save ``trees`` by name; ``stamp`` names what they were built for (the members)."""
        with self._part.write_batch(sync=True) as batch:
            for name, tree in trees.items():
                batch.put(name.encode(), tree)
            batch.put(self._STAMP, stamp)

    def take(self, stamp: bytes) -> dict[str, bytes] | None:
        """The trees saved for ``stamp``, removed from the store; None when none are (a crash, a first
        start, or trees saved for other members)."""
        saved = dict(self._part.iterator())
        if not saved:
            return None
        with self._part.write_batch(sync=True) as batch:
            for name in saved:
                batch.delete(name)
        if saved.pop(self._STAMP, None) != stamp:
            return None
        return {name.decode(): tree for name, tree in saved.items()}


class RepairMarks:
    """For each peer, the time (the hybrid clock's microseconds) at which the last repair with it that
    completed had started: every version this node held before then, the peer holds too (or a newer one).
    Tombstone GC reads them."""

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part

    def completed(self, peer: str) -> int:
        """When the last completed repair with ``peer`` started; 0 if none has."""
        raw: bytes | None = self._part.get(peer.encode())
        return int.from_bytes(raw, "big") if raw else 0

    def record(self, peer: str, started: int) -> None:
        if started > self.completed(peer):
            self._part.put(peer.encode(), started.to_bytes(8, "big"), sync=True)


class NodeIdentity:
    """This node's identity (16 random bytes, hex), generated the first time its system database opens,
    and the state of its data it saved (kvnode.healing.rebuild_state: "unknown" until a peer told whether
    this node was a member before, "rebuilding" until it got its records back; none once whole).

    A new identity is saved together with the state "unknown", in one write: a node that crashes before
    any peer answered is still unknown at its next start.

    >>> import tempfile
    >>> tmp = tempfile.TemporaryDirectory(); system = SystemDb.open(Path(tmp.name))
    >>> len(system.identity.value), system.identity.created, system.identity.saved_state()
    (32, True, 'unknown')
    >>> system.identity.save_state(""); system.close(); system = SystemDb.open(Path(tmp.name))
    >>> system.identity.created, system.identity.saved_state()
    (False, '')
    >>> system.close(); tmp.cleanup()
    """

    _ID = b"id"
    _STATE = b"state"

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part
        raw: bytes | None = part.get(self._ID)
        self.created = raw is None  # generated at this start: the data dir was new (or lost)
        if raw is None:
            raw = secrets.token_hex(16).encode()
            with part.write_batch(sync=True) as batch:
                batch.put(self._STATE, b"unknown")
                batch.put(self._ID, raw)
        self.value = raw.decode()

    def saved_state(self) -> str:
        """The state of this node's data as last saved; "" when it is whole."""
        raw: bytes | None = self._part.get(self._STATE)
        return raw.decode() if raw else ""

    def save_state(self, state: str) -> None:
        """Save the state of this node's data ("" when it is whole)."""
        if state:
            self._part.put(self._STATE, state.encode(), sync=True)
        else:
            self._part.delete(self._STATE, sync=True)


class PeerIdentities:
    """For each peer (by URL), the identity it had when this node last completed a handshake with it, and
    the one that identity replaced (a member that came back as another node), "" where none."""

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part

    def get(self, peer: str) -> tuple[str, str]:
        """The identity remembered for ``peer`` and the one it replaced."""
        raw: bytes | None = self._part.get(peer.encode())
        current, _, replaced = (raw or b"").decode().partition(" ")
        return current, replaced

    def remember(self, peer: str, identity: str) -> None:
        current, _ = self.get(peer)
        if identity != current:
            self._part.put(peer.encode(), f"{identity} {current}".encode(), sync=True)


class StoredMembership:
    """The cluster's identity and membership (kvnode.topology.membership), as this node last stored them, and
    since when (the hybrid clock's microseconds) it runs with that membership.

        >>> import tempfile
        >>> tmp = tempfile.TemporaryDirectory(); system = SystemDb.open(Path(tmp.name))
        >>> system.membership.load() is None
        True
        >>> system.membership.save(Membership.seeded(["http://a:1"]))
        >>> system.membership.load().urls
        ('http://a:1',)
        >>> system.membership.save(Membership.seeded(["http://b:1"]), left="http://a:1")
        >>> system.membership.left()  # stored without this node, which was http://a:1
        'http://a:1'
        >>> system.close(); tmp.cleanup()
    """

    _KEY = b"current"
    _SINCE = b"since"
    _LEFT = b"left"

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part

    def load(self) -> Membership | None:
        """The stored membership; None before the first start stored one. Raises ValueError when what is
        stored cannot be read."""
        raw: bytes | None = self._part.get(self._KEY)
        return None if raw is None else Membership.decode(raw)

    def save(self, membership: Membership, since: int = 0, *, left: str = "") -> None:
        """Store ``membership``, run with ``since`` (0: the time is not known yet, :meth:`since` says 0);
        ``left``: this node's URL, where ``membership`` is one without it (it left, or its join was
        undone)."""
        try:
            with self._part.write_batch(sync=True) as batch:
                batch.put(self._KEY, membership.encode())
                batch.put(self._SINCE, since.to_bytes(8, "big"))
                if left:
                    batch.put(self._LEFT, left.encode())
                else:
                    batch.delete(self._LEFT)
        except plyvel.Error as error:
            raise storage_error(error) from error

    def since(self) -> int:
        """Since when this node runs with the stored membership; 0 when not known."""
        raw: bytes | None = self._part.get(self._SINCE)
        return int.from_bytes(raw, "big") if raw else 0

    def left(self) -> str:
        """The URL this node had when it stored a membership without itself; "" when it did not."""
        raw: bytes | None = self._part.get(self._LEFT)
        return raw.decode() if raw else ""


class PaxosStates:
    """Each key's Paxos acceptor state (kvnode.paxos.acceptor), stored before the acceptor answers: with
    ``sync`` (the node's ``--fsync``) it survives a power loss, else a ``kill -9`` (the OS has it).

        >>> import tempfile
        >>> tmp = tempfile.TemporaryDirectory(); system = SystemDb.open(Path(tmp.name))
        >>> system.paxos.put(b"k", b"state", sync=False); system.paxos.get(b"k"), system.paxos.get(b"j")
        (b'state', None)
        >>> system.paxos.drop([b"k"]); list(system.paxos.items())
        []
        >>> system.close(); tmp.cleanup()
    """

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part

    def get(self, key: bytes) -> bytes | None:
        try:
            raw: bytes | None = self._part.get(key)
        except plyvel.Error as error:
            raise storage_error(error) from error
        return raw

    def put(self, key: bytes, state: bytes, *, sync: bool) -> None:
        """Store ``state`` for ``key``; raises StorageError (StorageFull for a full disk)."""
        try:
            self._part.put(key, state, sync=sync)
        except plyvel.Error as error:
            raise storage_error(error) from error

    def drop(self, keys: Iterable[bytes]) -> None:
        try:
            with self._part.write_batch() as batch:
                for key in keys:
                    batch.delete(key)
        except plyvel.Error as error:
            raise storage_error(error) from error

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key's state, in key order, from a snapshot (what GC reads)."""
        with self._part.snapshot() as snapshot, snapshot.iterator() as states:
            yield from states


class DataFormat:
    """The data dir's format, saved at its first start (a data dir from before formats were saved is
    format 1, the layout they all had)."""

    def __init__(self, part: plyvel.DB) -> None:
        self._part = part

    def saved(self) -> int:
        raw: bytes | None = self._part.get(b"version")
        return int(raw) if raw else 0

    def check(self, data_dir: Path) -> None:
        """Save this kvnode's format in a data dir that has none; StorageUnavailable, naming both formats,
        for one of a newer format than this kvnode reads."""
        saved = self.saved()
        if saved > DATA_FORMAT:
            raise StorageUnavailable(
                f"the data dir {data_dir} is of format {saved}, newer than format {DATA_FORMAT}, the one "
                "this kvnode reads: run the kvnode version that wrote it (or a newer one), or use another "
                "data dir"
            )
        if saved < DATA_FORMAT:
            self._part.put(b"version", str(DATA_FORMAT).encode(), sync=True)


class SystemDb:
    """The owner of the ``system`` LevelDB: it opens and closes it and hands each part its prefix."""

    def __init__(self, db: plyvel.DB) -> None:
        self._db = db
        self.clock_floor = ClockFloor(db.prefixed_db(CLOCK_PREFIX))
        self.hints: plyvel.DB = db.prefixed_db(HINTS_PREFIX)  # HintStore's, which keeps the format
        self.summaries = SavedSummaries(db.prefixed_db(SUMMARY_PREFIX))
        self.repair_marks = RepairMarks(db.prefixed_db(REPAIR_PREFIX))
        self.identity = NodeIdentity(db.prefixed_db(IDENTITY_PREFIX))
        self.peer_identities = PeerIdentities(db.prefixed_db(PEERS_PREFIX))
        self.membership = StoredMembership(db.prefixed_db(MEMBERS_PREFIX))
        self.format = DataFormat(db.prefixed_db(FORMAT_PREFIX))
        self.paxos = PaxosStates(db.prefixed_db(PAXOS_PREFIX))

    @classmethod
    def open(cls, data_dir: Path) -> SystemDb:
        """Raises kvnode.storage.keyspace.StorageUnavailable when the data dir cannot be opened, or is of a
        newer format than this kvnode reads."""
        system = cls(open_leveldb(data_dir, "system"))
        try:
            system.format.check(data_dir)
        except StorageUnavailable:
            system.close()
            raise
        return system

    def close(self) -> None:
        self._db.close()
