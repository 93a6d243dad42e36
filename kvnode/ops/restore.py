"""``python -m kvnode admin restore DIR [--authoritative]`` (kvnode.ops.backup has the commands): a
backup's versions written back to the cluster with their own timestamps, without bringing a deleted key
back (docs/backup.md).

The manifest and the versions file's size and sha256 are checked before anything is written (a corrupt
or truncated backup is refused with one line, exit 2). Then the versions go, in batches, to the node at
--url (``POST /v0/versions``, kvnode.node.versions_api), which writes each to its key's owners, the newer
version winning on each. kvnode.ops.backup_rules.RestoreRule decides which are written outright and which
only where the cluster still holds their key (``?check=live``); the others are skipped and counted. Exit 1
when a version could not be written: a restore may be run again, it is idempotent.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvnode.ops.backup_rules import BadBackup, RestoreRule, Way, check_manifest
from kvnode.ops.node_streams import READ_BYTES, Failed, Progress, frames, open_request, say
from kvnode.storage.frames import END, encode_frame
from kvnode.storage.records import decode

__all__ = ["MANIFEST", "VERSIONS", "Fetch", "restore", "verified"]

Fetch = Callable[..., dict[str, Any]]  # admin's JSON request: fetch(url, token, tls_ca, path="/v0/cluster")
VERSIONS, MANIFEST = "versions", "manifest.json"  # a backup's two files
_POST_TIMEOUT_S = 300.0  # for the node to write one batch to its owners
_BATCH_BYTES = 1024 * 1024  # versions are sent in bodies of about this size
_BATCH_FRAMES = 2000


def verified(directory: Path) -> dict[str, Any]:
    """The backup's manifest, once its versions file is checked against it; BadBackup otherwise."""
    try:
        manifest = dict(check_manifest(json.loads((directory / MANIFEST).read_text())))
    except FileNotFoundError:
        raise BadBackup(f"no {MANIFEST}: not a backup, or one that did not finish") from None
    except (OSError, ValueError) as error:  # unreadable, not JSON
        raise BadBackup(f"{MANIFEST} is unreadable: {error}") from None
    versions = directory / VERSIONS
    try:
        size = versions.stat().st_size
        if size != manifest["versions_bytes"]:
            raise BadBackup(
                f"{VERSIONS} is {size} bytes, the manifest says {manifest['versions_bytes']}: it is "
                "truncated or altered"
            )
        digest = hashlib.sha256()
        with versions.open("rb") as file:
            while data := file.read(READ_BYTES):
                digest.update(data)
    except OSError as error:
        raise BadBackup(f"cannot read {VERSIONS}: {error.strerror or error}") from None
    if digest.hexdigest() != manifest["versions_sha256"]:
        raise BadBackup(f"{VERSIONS} does not match the manifest's sha256: it is corrupt")
    return manifest


def restore(args: argparse.Namespace, fetch: Fetch) -> int:
    """Restore the backup in ``args.dir`` through the node at ``args.url``; the exit status."""
    try:
        manifest = verified(args.dir)
    except BadBackup as error:
        print(f"kvnode admin: cannot restore {args.dir}: {error}", file=sys.stderr)
        return 2
    view = fetch(args.url, args.token, args.tls_ca)
    unreachable = [member["url"] for member in view["members"] if not member["reachable"]]
    if unreachable:  # each version goes to every owner of its key, and a check=live read asks them all
        print(
            f"kvnode admin: cannot restore while members are unreachable from {args.url}: "
            f"{', '.join(unreachable)}",
            file=sys.stderr,
        )
        return 1
    rule = RestoreRule(
        same_cluster=view["cluster_id"] == manifest["cluster_id"],
        grace_us=view["gc_grace_s"] * 1_000_000,
        authoritative=args.authoritative,
    )
    began = time.monotonic()
    node_now_us = view["clock_us"]  # the cluster's time, carried forward by this machine's monotonic clock
    ways: Counter[Way] = Counter()
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    batches = {False: _Batch(), True: _Batch()}  # by whether the node checks the cluster first
    progress = Progress()

    def send(if_held: bool) -> None:
        body = batches[if_held].take()
        if body:
            answer = _post(args, body, if_held)
            outcomes.update({key: answer[key] for key in ("written", "kept", "absent", "failed")})
            if answer["failure"]:
                failures.append(answer["failure"])

    try:
        with (args.dir / VERSIONS).open("rb") as file:
            for key, raw in frames(file, str(args.dir / VERSIONS)):
                now_us = node_now_us + int((time.monotonic() - began) * 1_000_000)
                way = rule.way(decode(raw), now_us=now_us)
                ways[way] += 1
                if_held = way is Way.IF_HELD
                if batches[if_held].add(encode_frame(key, raw)):
                    send(if_held)
                if progress.due():
                    read = f"{ways.total()} of {manifest['counts']['keys']}"
                    say(f"restore: {read} versions read, {_tally(outcomes)}")
            send(False)
            send(True)
    except Failed as error:
        print(f"kvnode admin: restore stopped after {outcomes.total()} versions: {error}", file=sys.stderr)
        return 1
    seconds = time.monotonic() - began
    summary = {
        "restored": outcomes["written"],
        "kept_newer": outcomes["kept"],
        "skipped": outcomes["absent"],
        "failed": outcomes["failed"],
        "ways": {way.name.lower(): count for way, count in ways.items()},
        "seconds": round(seconds, 3),
    }
    print(json.dumps(summary) if args.json else _summary_line(summary, rule, seconds))
    if failures:
        print(f"kvnode admin: {outcomes['failed']} versions not written, e.g. {failures[0]}", file=sys.stderr)
        return 1
    return 0


def _summary_line(summary: dict[str, Any], rule: RestoreRule, seconds: float) -> str:
    line = (
        f"restored {summary['restored']} versions, {summary['kept_newer']} kept a newer version in the "
        f"cluster, {summary['skipped']} skipped"
    )
    if summary["skipped"]:
        line += (
            f" (older than the gc grace period of {rule.grace_us // 1_000_000} s, their keys gone from the "
            "cluster: not provably safe; --authoritative restores them)"
        )
    return line + f", {summary['failed']} failed, {seconds:.1f} s"


class _Batch:
    """Frames for one POST, up to about _BATCH_BYTES or _BATCH_FRAMES."""

    def __init__(self) -> None:
        self._frames: list[bytes] = []
        self._bytes = 0

    def add(self, frame: bytes) -> bool:
        """Whether the batch is full now."""
        self._frames.append(frame)
        self._bytes += len(frame)
        return self._bytes >= _BATCH_BYTES or len(self._frames) >= _BATCH_FRAMES

    def take(self) -> bytes:
        """The batch's body (b"" when empty), and the batch empty again."""
        if not self._frames:
            return b""
        body = b"".join(self._frames) + END
        self._frames, self._bytes = [], 0
        return body


def _tally(outcomes: Counter[str]) -> str:
    return (
        f"{outcomes['written']} restored, {outcomes['kept']} kept newer, {outcomes['absent']} skipped, "
        f"{outcomes['failed']} failed"
    )


def _post(args: argparse.Namespace, body: bytes, if_held: bool) -> dict[str, Any]:
    path = "/v0/versions?check=live" if if_held else "/v0/versions"
    with open_request(args, args.url, path, _POST_TIMEOUT_S, body) as reply:
        try:
            answer: dict[str, Any] = json.loads(reply.read())
        except (OSError, ValueError, http.client.HTTPException) as error:
            raise Failed(f"cannot read {args.url}'s answer: {error}") from None
    return answer
