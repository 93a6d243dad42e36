"""kvnode.storage.system_db on real LevelDB in pytest's temporary directories: its parts and their
prefixes."""

from __future__ import annotations

import itertools
from pathlib import Path

import plyvel
import pytest

from kvnode.storage.keyspace import Storage, StorageUnavailable
from kvnode.storage.records import Record
from kvnode.storage.system_db import DATA_FORMAT, FORMAT_PREFIX, PREFIXES, SystemDb


def test_the_clock_floor_of_a_new_data_dir_is_zero(system_db: SystemDb) -> None:
    assert system_db.clock_floor.load() == 0


def test_the_clock_floor_survives_close_and_reopen(tmp_path: Path) -> None:
    system = SystemDb.open(tmp_path / "node")
    system.clock_floor.persist(1_700_000_000_000_000)
    system.clock_floor.persist(1_700_000_000_250_000)
    system.close()
    reopened = SystemDb.open(tmp_path / "node")
    try:
        assert reopened.clock_floor.load() == 1_700_000_000_250_000
    finally:
        reopened.close()


def test_parts_keep_the_keys_earlier_versions_wrote(tmp_path: Path) -> None:
    """A data dir written before SystemDb existed reads the same: the floor at clock/floor, hints under
    hints/."""
    raw = plyvel.DB(str(tmp_path / "system"), create_if_missing=True)
    raw.put(b"clock/floor", (42).to_bytes(8, "big"))
    raw.put(b"hints/http://b:1\x00" + (1).to_bytes(8, "big"), b"a hint")
    raw.close()
    system = SystemDb.open(tmp_path)
    try:
        assert system.clock_floor.load() == 42
        assert list(system.hints.iterator()) == [(b"http://b:1\x00" + (1).to_bytes(8, "big"), b"a hint")]
    finally:
        system.close()


def test_no_part_prefix_starts_another() -> None:
    assert len(set(PREFIXES)) == len(PREFIXES)
    for one, other in itertools.permutations(PREFIXES, 2):
        assert not other.startswith(one), (one, other)


def test_a_part_sees_only_its_own_keys(system_db: SystemDb) -> None:
    system_db.clock_floor.persist(7)
    system_db.hints.put(b"floor", b"not the clock's")
    assert system_db.clock_floor.load() == 7
    assert list(system_db.hints.iterator()) == [(b"floor", b"not the clock's")]


def test_the_system_database_never_shows_in_the_client_keyspace(tmp_path: Path) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    system = SystemDb.open(tmp_path)
    try:
        system.clock_floor.persist(7)
        system.hints.put(b"k", b"v")
        assert list(storage.scan_live(b"", None, now=0)) == []
        storage.apply(b"clock/floor", Record.put(1, b"client"))
        assert system.clock_floor.load() == 7
    finally:
        system.close()
        storage.close()


def test_a_system_database_open_elsewhere_is_unavailable(system_db: SystemDb, tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable, match="cannot open data dir"):
        SystemDb.open(tmp_path / "node")


def test_a_new_data_dir_gets_an_identity_kept_across_restarts(tmp_path: Path) -> None:
    system = SystemDb.open(tmp_path / "node")
    identity = system.identity.value
    assert system.identity.created and system.identity.saved_state() == "unknown"
    system.identity.save_state("rebuilding")
    system.close()
    system = SystemDb.open(tmp_path / "node")
    try:
        assert system.identity.value == identity and not system.identity.created
        assert system.identity.saved_state() == "rebuilding"  # a crash during a rebuild resumes it
        system.identity.save_state("")
        assert system.identity.saved_state() == ""
    finally:
        system.close()
    other = SystemDb.open(tmp_path / "other")
    try:
        assert other.identity.value != identity
    finally:
        other.close()


def test_peer_identities_are_remembered_by_url(system_db: SystemDb) -> None:
    peers = system_db.peer_identities
    assert peers.get("http://b:1") == ("", "")
    peers.remember("http://b:1", "0b" * 16)
    peers.remember("http://c:1", "0c" * 16)
    peers.remember("http://b:1", "1b" * 16)
    peers.remember("http://b:1", "1b" * 16)  # met again: it still replaced the first
    assert peers.get("http://b:1") == ("1b" * 16, "0b" * 16)
    assert peers.get("http://c:1") == ("0c" * 16, "")


def test_a_new_data_dir_is_saved_with_this_kvnodes_format(tmp_path: Path) -> None:
    SystemDb.open(tmp_path).close()
    system = SystemDb.open(tmp_path)
    assert system.format.saved() == DATA_FORMAT
    system.close()


def test_a_data_dir_of_a_newer_format_is_refused_naming_both(tmp_path: Path) -> None:
    db = plyvel.DB(str(tmp_path / "system"), create_if_missing=True)
    db.put(FORMAT_PREFIX + b"version", str(DATA_FORMAT + 1).encode())
    db.close()
    with pytest.raises(
        StorageUnavailable, match=f"of format {DATA_FORMAT + 1}, newer than format {DATA_FORMAT}"
    ):
        SystemDb.open(tmp_path)
    SystemDb.open(tmp_path / "elsewhere").close()  # the refused one was closed: nothing held


def test_a_data_dir_from_before_formats_were_saved_is_the_first_format(tmp_path: Path) -> None:
    db = plyvel.DB(str(tmp_path / "system"), create_if_missing=True)
    db.put(b"clock/floor", (123).to_bytes(8, "big"))  # written by an earlier kvnode, no format saved
    db.close()
    system = SystemDb.open(tmp_path)
    assert system.format.saved() == DATA_FORMAT == 1
    system.close()
