"""A full disk: as root, in a child process's own mount namespace, a tmpfs mounted, filled to its last byte,
freed, and gone once the process ends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvnode.check.netns import isolation_unavailable
from tests.harness import REPO


@pytest.mark.skipif(bool(isolation_unavailable()), reason=isolation_unavailable() or "-")
def test_a_disk_filled_then_freed_and_gone_with_its_process(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from kvnode.check.disk import FullDisk
        from kvnode.check.netns import enter_private_mounts

        enter_private_mounts()
        disk = FullDisk(Path({str(disk)!r}), mib=2)
        assert os.path.ismount(disk.path)
        disk.fill()
        assert os.statvfs(disk.path).f_bavail == 0
        disk.free()
        assert os.statvfs(disk.path).f_bavail > 0
        print("filled and freed")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "filled and freed"
    assert disk.is_dir() and not os.path.ismount(disk)  # the mount was the child's own
