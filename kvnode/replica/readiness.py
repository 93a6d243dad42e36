"""Whether a replica's data is whole, as its local replica answers reads and its peers are told in a
handshake: unknown, rebuilding (its disk was lost) or serving. kvnode.healing.rebuild_state decides it."""

from __future__ import annotations

import enum

__all__ = ["NodeState"]


class NodeState(enum.StrEnum):
    UNKNOWN = "unknown"
    REBUILDING = "rebuilding"
    SERVING = "serving"
