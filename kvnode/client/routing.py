"""Which member of the cluster a client asks for a key, and when it may ask a member again. No I/O."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kvnode.topology.membership import Membership
from kvnode.topology.placement import Placement

__all__ = ["Members"]

_DEMOTED_S = 5.0  # a member that failed is tried last this long, then as its placement says again
_BACKOFF_S = 0.1  # before asking a member again within one call


class Members:
    """The cluster as the client sees it: the placement, and when each member may be asked again."""

    def __init__(self, placement: Placement) -> None:
        """``placement``: the members' placement, as the nodes place keys (its home: the datacenter whose
        owners the client asks first)."""
        self.placement = placement
        self.demoted_until: dict[str, float] = {}  # failed: tried after the others until then
        self.resting_until: dict[str, float] = {}  # answered 503: not asked before then

    @classmethod
    def learnt(cls, view: dict[str, Any], known: Members | None, datacenter: str = "") -> Members:
        """The members a ``/v0/cluster`` view (or a ``/v0/status``, which has no reachability) says, read
        whole first so that a bad one raises (ValueError, KeyError, TypeError) and changes nothing, with
        ``datacenter``'s owners first (by default the first datacenter by name); what ``known`` learnt of
        members still in the cluster stays, and those the node cannot reach are demoted."""
        membership = Membership.from_described(view)
        members = membership.urls
        unreachable = [str(member["url"]) for member in view.get("members", []) if not member["reachable"]]
        routing = cls(membership.placement_without((), datacenter))
        if known is not None:
            if known.placement.layout == routing.placement.layout:
                routing = known  # keeps its placement's cache of recent keys
            else:
                routing.demoted_until = {url: t for url, t in known.demoted_until.items() if url in members}
                routing.resting_until = {url: t for url, t in known.resting_until.items() if url in members}
        for url in unreachable:
            routing.demote(url)
        return routing

    def order(self, key: str) -> list[str]:
        """Every member for ``key``: its N owners first (placement order), demoted members last."""
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
