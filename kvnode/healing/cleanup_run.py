"""What ``admin cleanup`` did on this node, as it progresses (``GET /v0/cleanup``): one GC pass
(kvnode.healing.gc) that drops the live surplus copies this node holds (versions of keys it no longer
owns) without waiting for the grace period, each once every owner of its key holds that version or a
newer one. Pure: the pass adds to it.

>>> run = CleanupRun(started=10.0)
>>> run.scanned, run.dropped, run.bytes, run.kept_in_grace = 1000, 40, 4096, 2
>>> run.not_confirmed(("http://b:1",))
>>> run.ended = 12.5
>>> run.completed
False
>>> print(run.summary())
40 surplus copies dropped (4096 bytes) of 1000 versions read, 2 tombstones and expired values kept for their \
grace period; 1 kept: not confirmed by http://b:1 (1); in 2.5 s
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CleanupRefused", "CleanupRun"]


class CleanupRefused(Exception):
    """A cleanup cannot start now; the message says why and when it can."""


@dataclass
class CleanupRun:
    """One cleanup's figures; ``ended`` once its pass is over (``failed`` says why, when it stopped early)."""

    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    failed: str = ""
    scanned: int = 0  # versions read
    dropped: int = 0  # surplus copies dropped
    bytes: int = 0  # their keys' and stored versions' bytes (the disk's, once compacted)
    kept_in_grace: int = 0  # surplus tombstones and expired values: kept for their grace period
    kept_for_change: int = 0  # surplus copies kept because a membership change began meanwhile
    unconfirmed: int = 0  # surplus copies kept because an owner did not confirm it held them
    unconfirmed_by: collections.Counter[str] = field(default_factory=collections.Counter)  # by owner

    @property
    def done(self) -> bool:
        return self.ended is not None

    @property
    def completed(self) -> bool:
        """Done, and every live surplus copy gone: none kept for an owner or a change, no early stop."""
        return self.done and not (self.failed or self.unconfirmed or self.kept_for_change)

    def not_confirmed(self, owners: tuple[str, ...]) -> None:
        """A surplus copy kept: these owners did not confirm they held it (or a newer version)."""
        self.unconfirmed += 1
        self.unconfirmed_by.update(owners)

    def summary(self) -> str:
        """One line: dropped, read, kept and why, seconds."""
        seconds = (self.ended or time.monotonic()) - self.started
        line = f"{self.dropped} surplus copies dropped ({self.bytes} bytes) of {self.scanned} versions read"
        if self.kept_in_grace:
            line += f", {self.kept_in_grace} tombstones and expired values kept for their grace period"
        if self.unconfirmed:
            owners = ", ".join(f"{owner} ({count})" for owner, count in sorted(self.unconfirmed_by.items()))
            line += f"; {self.unconfirmed} kept: not confirmed by {owners}"
        if self.kept_for_change:
            line += f"; {self.kept_for_change} kept: a membership change began, run it again once it is over"
        if self.failed:
            line += f"; stopped: {self.failed}"
        return line + f"; in {seconds:.1f} s"

    def to_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "completed": self.completed,
            "seconds": round((self.ended or time.monotonic()) - self.started, 3),
            "scanned": self.scanned,
            "dropped": self.dropped,
            "bytes": self.bytes,
            "kept_in_grace": self.kept_in_grace,
            "kept_for_change": self.kept_for_change,
            "unconfirmed": self.unconfirmed,
            "unconfirmed_by": dict(sorted(self.unconfirmed_by.items())),
            "failed": self.failed,
            "summary": self.summary(),
        }
