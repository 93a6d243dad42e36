"""kvnode.ops.backup: a backup of members (canned servers in this process) is each key's newest version
among them, tombstones included, in one file of frames, with the manifest written last and checked by a
restore; the directory is created 0700 and the files 0600 (a backup holds every value); a directory that
holds a backup already, or anything else, is refused, and a member down, a stream that breaks off or one
out of key order leaves no backup."""

from __future__ import annotations

import argparse
import json
import stat
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from kvnode.ops import backup
from kvnode.ops.backup_rules import FORMAT
from kvnode.ops.node_http import fetch
from kvnode.ops.restore import MANIFEST, VERSIONS, verified
from kvnode.storage.frames import END, FrameParser, encode_frame
from kvnode.storage.records import Record, encode
from tests.canned_http import Answer, CannedServer, canned_server

# Two members' versions: each key's newest is b's k1, a's k2 (a tombstone), a's k3, b's k4 (expired).
A = [(b"k1", Record.put(5, b"old")), (b"k2", Record.delete(7)), (b"k3", Record.put(3, b"three"))]
B = [(b"k1", Record.put(9, b"new")), (b"k3", Record.put(2, b"older")), (b"k4", Record.put(4, b"x", ttl_us=1))]
NEWEST = sorted([A[1], A[2], B[0], B[2]])


def stream(versions: Sequence[tuple[bytes, Record]]) -> bytes:
    return b"".join(encode_frame(key, encode(record)) for key, record in versions) + END


@contextmanager
def members(*streams: Answer) -> Iterator[list[CannedServer]]:
    """One member per stream; the first also answers /v0/cluster with the membership of them all."""
    with ExitStack() as opened:
        servers = [opened.enter_context(canned_server({"/v0/versions": answer})) for answer in streams[1:]]
        view: dict[str, Any] = {"cluster_id": "c0ffee", "replication_factor": 2}
        first_answers = {"/v0/versions": streams[0]}
        first = opened.enter_context(canned_server(first_answers))
        view["cluster"] = [first.url, *(server.url for server in servers)]
        # Its own URL is in the view: the answer is added once the server runs, before anyone asks.
        first_answers["/v0/cluster"] = Answer(200, json.dumps(view).encode())
        yield [first, *servers]


def run(command: str, directory: Path, url: str, as_json: bool = False) -> int:
    args = argparse.Namespace(command=command, dir=directory, url=url, token=None, tls_ca=None, json=as_json)
    return backup.run(args, fetch)


def test_a_backup_holds_each_keys_newest_version_and_a_manifest_that_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with members(Answer(200, stream(A)), Answer(200, stream(B))) as servers:
        assert run("backup", tmp_path / "b", servers[0].url) == 0
    parser = FrameParser()
    assert parser.feed((tmp_path / "b" / VERSIONS).read_bytes()) == [(k, encode(r)) for k, r in NEWEST]
    parser.finish()
    manifest = verified(tmp_path / "b")
    assert manifest["format"] == FORMAT and manifest["cluster_id"] == "c0ffee"
    assert manifest["members"] == [server.url for server in servers] and manifest["replication_factor"] == 2
    assert manifest["counts"] == {"keys": 4, "values": 2, "tombstones": 1, "expired": 1}
    assert manifest["newest_timestamp_us"] == 9
    out = capsys.readouterr()
    assert out.out.startswith(
        f"backup of 2 members in {tmp_path / 'b'}: 4 keys (2 values, 1 tombstones, 1 expired)"
    )
    assert out.err == "backup: streaming the versions of 2 members\n"
    modes = {
        path.name: stat.S_IMODE(path.stat().st_mode) for path in [tmp_path / "b", *(tmp_path / "b").iterdir()]
    }
    assert modes == {"b": 0o700, VERSIONS: 0o600, MANIFEST: 0o600}  # its owner's only: it holds every value


def test_the_summary_is_json_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with members(Answer(200, stream(A))) as servers:
        assert run("backup", tmp_path / "b", servers[0].url, as_json=True) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["keys"] == 3 and summary["dir"] == str(tmp_path / "b")
    assert summary["bytes"] == (tmp_path / "b" / VERSIONS).stat().st_size


def test_a_directory_that_holds_a_backup_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / MANIFEST).write_text("{}")
    assert run("backup", tmp_path / "b", "http://127.0.0.1:1") == 2  # refused before any node is asked
    assert (
        capsys.readouterr().err
        == f"kvnode admin: {tmp_path / 'b'} holds a backup already: give another directory\n"
    )


def test_a_directory_that_holds_anything_else_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/backup.md's "a new or empty directory", made true: refused before any node is asked."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine\n")
    (tmp_path / "b" / "old").mkdir()
    assert run("backup", tmp_path / "b", "http://127.0.0.1:1") == 2
    assert capsys.readouterr().err == (
        f"kvnode admin: {tmp_path / 'b'} is not empty (it holds notes.txt and 1 more): give a new or empty "
        "directory\n"
    )
    (tmp_path / "file").write_text("")
    assert run("backup", tmp_path / "file", "http://127.0.0.1:1") == 2
    assert capsys.readouterr().err == (
        f"kvnode admin: {tmp_path / 'file'} is not a directory: give a new or empty directory\n"
    )
    assert sorted(path.name for path in (tmp_path / "b").iterdir()) == ["notes.txt", "old"]


@pytest.mark.parametrize(
    ("second", "said"),
    [
        (Answer(503, b"not ready\n"), "backup incomplete, members unread: {url} answered 503: not ready"),
        (
            Answer(200, stream(B)[:30], length=len(stream(B))),
            "backup incomplete: {url}'s versions: the frames end without their end frame",
        ),
        (Answer(200, stream(B[::-1])), "backup incomplete: a member's versions are out of order: key b'k3'"),
    ],
)
def test_a_member_unread_or_whose_versions_break_off_leaves_no_backup(
    second: Answer, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with members(Answer(200, stream(A)), second) as servers:
        assert run("backup", tmp_path / "b", servers[0].url) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("kvnode admin: " + said.format(url=servers[1].url)), err
    assert not (tmp_path / "b").exists() or list((tmp_path / "b").iterdir()) == []
