"""A full disk for ``check --local --nemesis disk`` (root only): one node's data dir is a small tmpfs, mounted
in the check's own mount namespace (kvnode.check.netns.enter_private_mounts) before the node starts; the
fault fills it with a file until no byte is left, and the heal deletes that file.

>>> tmpfs_command(Path("/tmp/data/node-1"), 64)
['mount', '-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', '/tmp/data/node-1']
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

__all__ = ["DISK_MIB", "FullDisk", "tmpfs_command"]

DISK_MIB = 256  # room for a long check's records on the node whose disk fills now and then
_BLOCK = b"\0" * (1 << 20)


def tmpfs_command(path: Path, mib: int) -> list[str]:
    return ["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(path)]


class FullDisk:
    """The tmpfs at ``path``, and the file that fills it."""

    def __init__(self, path: Path, mib: int = DISK_MIB) -> None:
        self.path = path
        self._filler = path / "check-filler"
        path.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(tmpfs_command(path, mib), capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise OSError(f"cannot mount a tmpfs at {path}: {result.stderr.strip()}")

    def fill(self) -> None:
        """Write until the disk is full (ENOSPC ends the loop)."""
        with open(self._filler, "ab", buffering=0) as filler, contextlib.suppress(OSError):
            while filler.write(_BLOCK):
                pass

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)
