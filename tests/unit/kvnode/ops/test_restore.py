"""kvnode.ops.restore.verified: a backup is checked against its manifest before anything is written; each
way it can be wrong is refused with its own one-line reason."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kvnode.ops.backup_rules import FORMAT, BadBackup
from kvnode.ops.restore import MANIFEST, VERSIONS, verified
from kvnode.storage.frames import END, encode_frame
from kvnode.storage.records import Record, encode


def backup(directory: Path, **changes: object) -> Path:
    """A one-key backup in ``directory`` whose manifest has ``changes``."""
    versions = encode_frame(b"k", encode(Record.put(5, b"v"))) + END
    directory.mkdir()
    (directory / VERSIONS).write_bytes(versions)
    manifest = {
        "format": FORMAT,
        "cluster_id": "c0ffee",
        "members": ["http://a:1"],
        "newest_timestamp_us": 5,
        "taken_at": "2026-11-27T12:00:00Z",
        "counts": {"keys": 1, "values": 1, "tombstones": 0, "expired": 0},
        "versions_bytes": len(versions),
        "versions_sha256": hashlib.sha256(versions).hexdigest(),
        **changes,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest))
    return directory


def test_a_whole_backup_passes_with_its_manifest(tmp_path: Path) -> None:
    assert verified(backup(tmp_path / "b"))["cluster_id"] == "c0ffee"


def test_a_changed_byte_a_cut_file_and_a_missing_or_bad_manifest_are_each_refused(tmp_path: Path) -> None:
    corrupt = backup(tmp_path / "corrupt")
    data = bytearray((corrupt / VERSIONS).read_bytes())
    data[10] ^= 1
    (corrupt / VERSIONS).write_bytes(bytes(data))
    truncated = backup(tmp_path / "truncated")
    (truncated / VERSIONS).write_bytes(data[:-4])
    unfinished = backup(tmp_path / "unfinished")
    (unfinished / MANIFEST).unlink()
    garbled = backup(tmp_path / "garbled")
    (garbled / MANIFEST).write_text("{not json")
    lost = backup(tmp_path / "lost")
    (lost / VERSIONS).unlink()
    cases = [
        (corrupt, "does not match the manifest's sha256: it is corrupt"),
        (truncated, f"{VERSIONS} is {len(data) - 4} bytes, the manifest says {len(data)}: it is truncated"),
        (unfinished, f"no {MANIFEST}: not a backup, or one that did not finish"),
        (garbled, f"{MANIFEST} is unreadable"),
        (lost, f"cannot read {VERSIONS}: No such file or directory"),
        (backup(tmp_path / "newer", format=FORMAT + 1), f"this kvnode restores format {FORMAT}"),
    ]
    for directory, reason in cases:
        with pytest.raises(BadBackup, match=reason) as refused:
            verified(directory)
        assert "\n" not in str(refused.value), directory
