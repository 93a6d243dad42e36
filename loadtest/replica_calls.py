"""The nodes' replica-call counters (``kvnode_replica_calls_total`` on /metrics), summed over a cluster (of
every op, or of some: :data:`REQUEST_OPS`, the calls client requests make), and the calls a run made per
client request, from a reading before and one after.

>>> calls_made(Counter(ok=10), Counter(ok=40, timeout=2), requests=10)
{'total': 32, 'per_request': 3.2, 'by_outcome': {'ok': 30, 'timeout': 2}}
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["REPLICA_CALLS", "REQUEST_OPS", "calls_made", "replica_calls"]

REPLICA_CALLS = "kvnode_replica_calls_total"
# The ops a client request's calls carry (read repair's included); not clock probes, hints or repairs,
# which every member makes to each peer whatever the load, so more with every member.
REQUEST_OPS = frozenset({"read", "write"})
_SCRAPE_TIMEOUT_S = 2.0


def replica_calls(
    urls: Sequence[str], ops: Collection[str] | None = None, peers: Collection[str] | None = None
) -> Counter[str] | None:
    """The ``kvnode_replica_calls_total`` counters summed over the nodes that answer, by outcome label, of
    every op or of ``ops``, to every replica or to ``peers`` (their URLs); None when no node exposes them
    (no /metrics, or no such counter), so the report shows "n/a"."""
    totals: Counter[str] = Counter()
    found = False
    for url in urls:
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=_SCRAPE_TIMEOUT_S) as response:
                text = response.read().decode()
        except (urllib.error.URLError, OSError, ValueError):
            continue  # a node that is down (replica-down) or has no /metrics
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == REPLICA_CALLS:
                    found = True
                    labels = sample.labels
                    if (ops is None or labels.get("op") in ops) and (
                        peers is None or labels.get("peer") in peers
                    ):
                        totals[labels.get("outcome", "")] += int(sample.value)
    return totals if found else None


def calls_made(
    before: Counter[str] | None, after: Counter[str] | None, requests: int
) -> dict[str, Any] | None:
    """The replica calls a run made, per client request and by outcome, from two counter readings."""
    if before is None or after is None or not requests:
        return None
    by_outcome = {outcome: after[outcome] - before.get(outcome, 0) for outcome in after}
    total = sum(by_outcome.values())
    return {"total": total, "per_request": round(total / requests, 3), "by_outcome": by_outcome}
