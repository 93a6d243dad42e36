"""Every process the profiler starts, kept by PID so that a stop (or Ctrl-C) ends exactly those.

Children run in their own session: a Ctrl-C in the terminal then reaches only the profiler, which stops
its children in order (a py-spy recorder stopped by SIGINT still writes its file) instead of every
process getting the signal at once. They also get SIGTERM if the profiler itself dies.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from kvnode.ops.processes import die_with_parent

__all__ = ["Children"]

_STOP_TIMEOUT = 15.0


class Children:
    """Processes started through start(); stop() and stop_all() signal them by PID, then SIGKILL."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        argv: Sequence[str],
        *,
        log: Path | None = None,
        stdout: int | IO[bytes] | None = None,
        stderr: int | IO[bytes] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start argv; with ``log``, stdout and stderr are appended to that file."""
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as log_file:
                return self.start(argv, stdout=log_file, stderr=subprocess.STDOUT)
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self.processes.append(process)
        return process

    def stop(
        self, process: subprocess.Popen[bytes], signum: int = signal.SIGTERM, timeout: float = _STOP_TIMEOUT
    ) -> int:
        """Signal one child, wait up to ``timeout``, SIGKILL if it is still there; its exit status."""
        if process.poll() is None:
            process.send_signal(signum)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
        finally:
            if process in self.processes:
                self.processes.remove(process)

    def stop_all(self, timeout: float = _STOP_TIMEOUT) -> None:
        """SIGTERM every child still running, then SIGKILL those that outlive ``timeout``."""
        running = [process for process in self.processes if process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
