"""A full disk: as root, in a child process's own mount namespace, a tmpfs mounted, filled to its last byte,
freed, and gone once the process ends."""

from __future__ import annotations

from pathlib import Path

from kvnode.check.disk import tmpfs_command


def test_the_tmpfs_is_sized_in_mebibytes() -> None:
    assert tmpfs_command(Path("/d"), 8) == ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", "/d"]
