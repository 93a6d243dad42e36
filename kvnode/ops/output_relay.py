"""A local server's output, when it goes to no file: read by a thread while the server starts
(kvnode.ops.processes.ServerProcess), so that a start that fails shows only the failing server's line."""

from __future__ import annotations

import sys
import threading
from typing import IO

__all__ = ["OutputRelay"]

_DRAIN_TIMEOUT = 2.0  # seconds to read what an exited child wrote last


class OutputRelay:
    """A child's output, read line by line by a thread: held while the child starts, so that a start
    that fails shows only the failing child's line, then passed on to this process's stderr."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.last_line = ""
        self._held: list[str] | None = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[bytes]) -> None:
        with stream:
            for raw in stream:
                line = raw.decode(errors="replace")
                with self._lock:
                    if line.strip():
                        self.last_line = line.strip()
                    if self._held is None:
                        sys.stderr.write(line)
                        sys.stderr.flush()
                    else:
                        self._held.append(line)

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
            sys.stderr.write("".join(held))
            sys.stderr.flush()

    def drain(self) -> None:
        """Wait (briefly) until everything the exited child wrote has been read."""
        self._thread.join(_DRAIN_TIMEOUT)
