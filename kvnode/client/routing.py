"""Which member of the cluster a client asks for a key, and when it may ask a member again. No I/O."""

from __future__ import annotations

import time
from collections.abc import Sequence

from kvnode.topology.placement import Placement

__all__ = ["Members"]

_DEMOTED_S = 5.0  # a member that failed is tried last this long, then as its placement says again
_BACKOFF_S = 0.1  # before asking a member again within one call


class Members:
    """The cluster as the client sees it: the placement, and when each member may be asked again."""

    def __init__(self, members: Sequence[str], tokens: Sequence[str] = ()) -> None:
        """``tokens``: each member's placement token, as the nodes say (by default its URL)."""
        self.placement = Placement(members, tokens)
        self.demoted_until: dict[str, float] = {}  # failed: tried after the others until then
        self.resting_until: dict[str, float] = {}  # answered 503: not asked before then

    def order(self, key: str) -> list[str]:
        """Every member for ``key``: its replicas first (placement order), demoted members last."""
        return self.demoted_last(self.placement.order(key.encode("utf-8")))

    def demoted_last(self, members: Sequence[str]) -> list[str]:
        """``members`` in their order, except that those demoted now come after the others."""
        now = time.monotonic()
        return sorted(members, key=lambda url: self.demoted_until.get(url, 0.0) > now)

    def demote(self, url: str) -> None:
        self.demoted_until[url] = time.monotonic() + _DEMOTED_S

    def rest(self, url: str, seconds: float) -> None:
        self.resting_until[url] = max(self.resting_until.get(url, 0.0), time.monotonic() + seconds)

    def next_for(self, order: Sequence[str], tried: Sequence[str]) -> tuple[str, float]:
        """The member to ask next, and how long to wait first: the first of ``order`` not tried in this
        call and not resting; else the one ready soonest. Once every member was tried, any of them."""
        now = time.monotonic()
        untried = [url for url in order if url not in tried]
        for url in untried:
            if self.resting_until.get(url, 0.0) <= now:
                return url, 0.0
        url = min(untried or order, key=lambda member: self.resting_until.get(member, 0.0))
        wait = self.resting_until.get(url, 0.0) - now
        return url, max(wait, 0.0 if untried else _BACKOFF_S)
