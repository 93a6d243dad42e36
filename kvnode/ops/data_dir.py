"""Who holds a data dir: a node that has its LevelDB databases open, or the ``cluster`` command, which
keeps ``DATA_DIR/cluster.pid`` locked while it runs. A second node or cluster on the same dir is refused
with one line naming that process, instead of LevelDB's "IO error: lock ... Resource temporarily
unavailable". ``python -m kvnode.ops.data_dir DIR`` (``make reset``) exits 1 naming the process that
holds DIR or a node dir in it, 0 when none does: only then may it be deleted."""

from __future__ import annotations

import fcntl
import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PID_FILE", "ClusterPidFile", "ClusterRunning", "data_dir_holder", "tree_holder"]

PID_FILE = "cluster.pid"

# struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid, padded to 32 bytes.
_FLOCK = "hhqqi"
_FLOCK_SIZE = 32


def _lock_holder(path: Path) -> int | None:
    """The PID of another process holding a POSIX lock on ``path`` (LevelDB locks its LOCK file so), or
    None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0).ljust(_FLOCK_SIZE, b"\0")
        kind, _, _, _, pid = struct.unpack_from(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    finally:
        os.close(fd)
    return None if kind == fcntl.F_UNLCK else int(pid)


def data_dir_holder(data_dir: Path) -> int | None:
    """The PID of a process that has one of the LevelDB databases in ``data_dir`` open, or None."""
    return next(
        (pid for lock in sorted(data_dir.glob("*/LOCK")) if (pid := _lock_holder(lock)) is not None), None
    )


def tree_holder(data_dir: Path) -> int | None:
    """The PID of a ``cluster`` command running on ``data_dir``, or of a node using it or one of the
    directories in it (``cluster``'s node-PORT, a node started by hand on data/node-8083), or None."""
    dirs = [data_dir, *sorted(path for path in data_dir.glob("*") if path.is_dir())]
    return _lock_holder(data_dir / PID_FILE) or next(
        (pid for path in dirs if (pid := data_dir_holder(path)) is not None), None
    )


def main(argv: Sequence[str]) -> int:
    """Exit 1, naming it, when a process holds the one directory given; 0 when none does."""
    (data_dir,) = (Path(arg) for arg in argv)
    pid = tree_holder(data_dir)
    if pid is None:
        return 0
    print(f"kvnode: {data_dir} is in use by pid {pid} (make run?): stop it first (Ctrl-C)", file=sys.stderr)
    return 1


class ClusterRunning(Exception):
    """Another ``cluster`` command runs on this data dir."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        how = f"Ctrl-C where it runs, or kill {pid}" if pid else "Ctrl-C where it runs"
        super().__init__(f"a kvnode cluster is already running on {data_dir} (pid {pid}); stop it with {how}")
        self.pid = pid


class ClusterPidFile:
    """``DATA_DIR/cluster.pid``: this process's PID, locked while it runs a cluster on DATA_DIR. The lock,
    not the file, says whether a cluster runs, so a file left by a killed command does not count."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / PID_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write this PID; ClusterRunning if another process holds it, OSError if the
        file cannot be written."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ClusterRunning(self.data_dir, _lock_holder(self.path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)  # closing it drops the lock
        self._fd = None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
