"""``python -m kvnode admin backup DIR`` and ``admin restore DIR [--authoritative]``: a cluster-wide backup
taken while the cluster serves, and its restore without bringing deleted keys back (docs/backup.md).

    python -m kvnode admin --url http://127.0.0.1:8080 backup /backups/monday
    python -m kvnode admin --url http://127.0.0.1:8080 restore /backups/monday

``backup`` reads the membership from the node at --url (``GET /v0/cluster``), streams every member's
versions (``GET /v0/versions``, kvnode.node.versions_api), merges them by key keeping each key's newest
version (kvnode.ops.backup_rules.merge_newest: one read buffer per member in memory, never the store), and
writes DIR/versions (the merged frames, kvnode.storage.frames) and, last, DIR/manifest.json: a directory
without a manifest is no backup. DIR is new or empty (anything else is refused before a node is asked); a
backup holds every value, so DIR is created 0700 and its files 0600, readable by their owner only. Every
member must answer: a member down fails the backup (exit 1, naming it), since what only it holds would be
missing.

``restore`` is kvnode.ops.restore. Both print progress on stderr while they run and one summary line at
the end (``--json``: a JSON object).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any, BinaryIO

from kvnode.ops.backup_rules import FORMAT, Counts, OutOfOrder, merge_newest
from kvnode.ops.node_streams import Failed, Progress, frames, open_request, say
from kvnode.ops.parsing import OneLineParser
from kvnode.ops.restore import MANIFEST, VERSIONS, Fetch, restore
from kvnode.storage.frames import END, encode_frame
from kvnode.storage.records import decode

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = ("backup", "restore")
_STREAM_TIMEOUT_S = 60.0  # a member that sends nothing for this long has failed


def add_commands(commands: argparse._SubParsersAction[OneLineParser], after: OneLineParser) -> None:
    """The two commands, on admin's subcommand parsers (``after`` holds the options a command takes)."""
    backup = commands.add_parser(
        "backup", parents=[after], help="stream every member's versions into DIR (the cluster keeps serving)"
    )
    backup.add_argument("dir", type=Path, help="a new or empty directory")
    restore = commands.add_parser(
        "restore",
        parents=[after],
        help="write a backup's versions back: newest wins, deleted keys stay deleted",
    )
    restore.add_argument("dir", type=Path, help="a directory that backup wrote")
    restore.add_argument(
        "--authoritative",
        action="store_true",
        help="the backup is the truth: restore old versions whose keys the cluster no longer has too",
    )


def run(args: argparse.Namespace, fetch: Fetch) -> int:
    """Run the command; exit status 0, 1 (incomplete: the line says what), 2 (refused: one line)."""
    return _backup(args, fetch) if args.command == "backup" else restore(args, fetch)


def _backup(args: argparse.Namespace, fetch: Fetch) -> int:
    directory: Path = args.dir
    refusal = _not_new_or_empty(directory)
    if refusal:
        print(f"kvnode admin: {refusal}", file=sys.stderr)
        return 2
    view = fetch(args.url, args.token, args.tls_ca)
    members: list[str] = view["cluster"]
    began = time.monotonic()
    with ExitStack() as opened:
        replies, unread = {}, []
        for member in members:
            try:
                replies[member] = opened.enter_context(
                    open_request(args, member, "/v0/versions", _STREAM_TIMEOUT_S)
                )
            except Failed as error:
                unread.append(str(error))
        if unread:
            print(f"kvnode admin: backup incomplete, members unread: {'; '.join(unread)}", file=sys.stderr)
            return 1
        say(f"backup: streaming the versions of {len(members)} members")
        partial = directory / (VERSIONS + ".partial")
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with _private(partial) as out:
                counts, written, digest = _write_merged(replies, out)
                _synced(out)
            partial.replace(directory / VERSIONS)
            manifest = _manifest(view, counts, written, digest)
            _write_atomically(directory / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        except (Failed, OSError) as error:  # a member's stream broke off; DIR cannot be written
            partial.unlink(missing_ok=True)
            print(f"kvnode admin: backup incomplete: {error}", file=sys.stderr)
            return 1
    seconds = time.monotonic() - began
    summary = {**manifest["counts"], "bytes": written, "seconds": round(seconds, 3), "dir": str(directory)}
    print(
        json.dumps(summary)
        if args.json
        else f"backup of {len(members)} members in {directory}: {counts.keys} keys ({counts.values} values, "
        f"{counts.tombstones} tombstones, {counts.expired} expired), {written} bytes, {seconds:.1f} s"
    )
    return 0


def _not_new_or_empty(directory: Path) -> str:
    """Why ``directory`` cannot take a backup ("" when it can: it is new, or an empty directory)."""
    if (directory / MANIFEST).exists():
        return f"{directory} holds a backup already: give another directory"
    if directory.exists() and not directory.is_dir():
        return f"{directory} is not a directory: give a new or empty directory"
    held = sorted(entry.name for entry in directory.iterdir()) if directory.is_dir() else []
    if held:
        more = f" and {len(held) - 1} more" if len(held) > 1 else ""
        return f"{directory} is not empty (it holds {held[0]}{more}): give a new or empty directory"
    return ""


def _private(path: Path) -> BinaryIO:
    """``path`` opened for writing, created 0600 (a backup holds every value), truncated if it exists."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def _manifest(view: dict[str, Any], counts: Counts, written: int, digest: str) -> dict[str, Any]:
    """What a restore checks and needs to know of a backup (kvnode.ops.backup_rules.check_manifest)."""
    return {
        "format": FORMAT,
        "cluster_id": view["cluster_id"],
        "members": view["cluster"],
        "replication_factor": view.get("replication_factor"),  # where the node reports one
        "newest_timestamp_us": counts.newest_timestamp_us,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "counts": counts.to_json(),
        "versions_bytes": written,
        "versions_sha256": digest,
    }


def _write_merged(replies: dict[str, BinaryIO], out: BinaryIO) -> tuple[Counts, int, str]:
    """Merge the members' streams into ``out``: the counts, the bytes written and their sha256."""
    counts, digest, written = Counts(), hashlib.sha256(), 0
    now_us = time.time_ns() // 1000
    progress = Progress()
    streams = [frames(reply, f"{member}'s versions") for member, reply in replies.items()]
    try:
        for key, raw in merge_newest(streams):
            frame = encode_frame(key, raw)
            out.write(frame)
            digest.update(frame)
            written += len(frame)
            counts.add(decode(raw), now_us)
            if progress.due():
                say(f"backup: {counts.keys} keys, {written} bytes written")
    except OutOfOrder as error:
        raise Failed(f"a member's versions are out of order: {error}") from None
    out.write(END)
    digest.update(END)
    return counts, written + len(END), digest.hexdigest()


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    with _private(partial) as out:
        out.write(text.encode())
        _synced(out)
    os.replace(partial, path)


def _synced(file: IO[Any]) -> None:
    """On disk before the manifest says the backup is whole."""
    file.flush()
    os.fsync(file.fileno())
