"""The admin's binary requests to nodes for ``backup`` and ``restore`` (kvnode.ops.backup,
kvnode.ops.restore): a request whose answer is read as it comes (a stream of frames, kvnode.storage.frames)
or that sends a body of frames, their failures as one line naming the node, and progress lines on stderr.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import BinaryIO

from kvnode.access.tls import verifying_context
from kvnode.storage.frames import BadFrames, FrameParser

__all__ = ["READ_BYTES", "Failed", "Progress", "frames", "open_request", "say"]

READ_BYTES = 64 * 1024  # read from a stream or a file at a time
_PROGRESS_S = 2.0  # at most one progress line this often


class Failed(Exception):
    """A member or the node could not be read or written; the message says which and why."""


def open_request(
    args: argparse.Namespace, url: str, path: str, timeout: float, body: bytes | None = None
) -> BinaryIO:
    """The node's answer to a request, to be read; Failed (one line naming the node) unless it is 200."""
    headers = {"Content-Type": "application/octet-stream"}
    if args.token is not None:
        headers["Authorization"] = f"Bearer {args.token}"
    context = None if args.tls_ca is None else verifying_context(args.tls_ca)
    method = "GET" if body is None else "POST"
    request = urllib.request.Request(url + path, data=body, headers=headers, method=method)
    try:
        reply: BinaryIO = urllib.request.urlopen(request, timeout=timeout, context=context)
    except urllib.error.HTTPError as error:
        reason = error.read().decode("utf-8", "replace").strip().splitlines()
        raise Failed(f"{url} answered {error.code}: {reason[0] if reason else error.reason}") from None
    except urllib.error.URLError as error:
        raise Failed(f"{url}: {error.reason}") from None
    except (OSError, http.client.HTTPException) as error:
        raise Failed(f"{url}: {error}") from None
    return reply


class Progress:
    """When the next progress line is due: at most one every _PROGRESS_S."""

    def __init__(self) -> None:
        self._next = time.monotonic() + _PROGRESS_S

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + _PROGRESS_S
        return True


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def frames(reply: BinaryIO, what: str) -> Iterator[tuple[bytes, bytes]]:
    """The frames of a stream, read a buffer at a time; Failed (naming ``what``) for a stream that breaks
    off or is not frames."""
    parser = FrameParser()
    try:
        while data := reply.read(READ_BYTES):
            yield from parser.feed(data)
        parser.finish()
    except (BadFrames, OSError, http.client.HTTPException) as error:
        raise Failed(f"{what}: {error or type(error).__name__}") from None
