"""Points of a membership change where a test makes the node end as ``kill -9`` would (``--crash-at``):
nothing after the point runs, not even a log line, so the test sees what a real crash there leaves.

- ``change:claimant-took``: the node joining or replacing a member, once the claimant took the change
  and before this node stored it (kvnode.cluster.bootstrap, through kvnode.cluster.changes.make_change);
- ``change:stored``: the same node, once it stored the change and before it offered it to the others;
- ``settle:claimant-took``, ``settle:stored``: the same two points of a join's last step, which makes
  the node that joined a member like the others (kvnode.cluster.own_part);
- ``leave:streamed``: a node leaving, once it sent every record it holds to their next owners and
  before it removed itself; ``depart:claimant-took``, ``depart:stored``: the two points of that removal;
- ``resize:streamed``: the claimant of a new replication factor, once it streamed every new copy and
  before it made the factor count;
- ``adopt:stored``: any member, once it stored a membership offered to it and before it runs with it
  (kvnode.cluster.members).
"""

from __future__ import annotations

import os

__all__ = ["CRASH_POINTS", "crash_point"]

CRASH_POINTS = (
    "change:claimant-took",
    "change:stored",
    "settle:claimant-took",
    "settle:stored",
    "leave:streamed",
    "depart:claimant-took",
    "depart:stored",
    "resize:streamed",
    "adopt:stored",
)


def crash_point(point: str, crash_at: str) -> None:
    """End the process now if ``crash_at`` (the node's ``--crash-at``) names ``point``."""
    if crash_at == point:
        os._exit(137)  # the status a SIGKILL gives; no cleanup, no buffered output
