"""kvnode.cluster.crash_points: a node started with --crash-at ends at that point as kill -9 would (exit
status 137, nothing after it runs), and passes every other point. Run in a child
Python process, since the point ends the process it is in."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
from kvnode.cluster.crash_points import crash_point
crash_point("change:stored", "adopt:stored")
crash_point("change:stored", "")
print("passed the other points", flush=True)
crash_point("adopt:stored", "adopt:stored")
print("after the crash point", flush=True)
"""


def test_the_named_point_ends_the_process_as_kill_9_would_and_other_points_pass() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (137, "passed the other points\n", "")
