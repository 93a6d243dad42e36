"""The faults ``check --cluster URL,...`` can inject into a cluster it did not start: only what the admin API
allows. That is a membership change: a member leaves (``POST /v0/leave``, as ``admin leave`` asks it), once,
when the cluster has more members than its replication factor; it stays out afterwards (to bring it back,
start it with a fresh data dir and ``--join``). Killing, pausing, partitioning a node, shifting its clock
or filling its disk need the machine it runs on: each is said and skipped (``check --local`` does them all).
"""

from __future__ import annotations

import random
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from kvnode.check.nemesis import Fault
from kvnode.ops.node_http import Unreachable, fetch
from kvnode.topology.membership import Membership

__all__ = ["RemoteFaults"]

_NEEDS_THE_MACHINE = {
    "kill": "killing a node",
    "pause": "pausing a node",
    "partition": "cutting the network",
    "clock": "shifting a node's clock",
    "disk": "filling a node's disk",
}


class RemoteFaults:
    """A running cluster reached at ``urls`` (with the admin ``token`` and the ``tls_ca`` its nodes need)."""

    def __init__(self, urls: Sequence[str], token: str | None, tls_ca: Path | None) -> None:
        self._urls = list(urls)
        self._token = token
        self._tls_ca = tls_ca
        self._left = False

    def unavailable(self, kind: str) -> str:
        if kind in _NEEDS_THE_MACHINE:
            return (
                f"{kind} skipped: {_NEEDS_THE_MACHINE[kind]} needs its machine, not the admin API "
                "(check --local injects it)"
            )
        try:
            view = fetch(self._urls[0], self._token, self._tls_ca)
        except Unreachable as error:
            return f"membership skipped: {error}"
        owners = Membership.from_described(view).placement().replication  # N: a key's, in every datacenter
        if len(view["cluster"]) <= owners:
            return (
                f"membership skipped: a member may leave only a cluster of more members "
                f"({len(view['cluster'])}) than its replication factor ({owners})"
            )
        return ""

    def targets(self) -> list[str]:
        return list(self._urls)

    def begin(self, kind: str, rng: random.Random) -> Fault:
        """The one leave: the last member in the membership that is not the node asked."""
        assert kind == "membership"
        if self._left:
            return Fault(kind, "-", "no more: one member left already, and stays out", done=True)
        asked = self._urls[0]
        members = fetch(asked, self._token, self._tls_ca)["cluster"]
        leaving = next(member for member in reversed(members) if member != asked)
        if leaving in self._urls:
            self._urls.remove(leaving)  # the workers stop sending to it
        path = "/v0/leave?" + urllib.parse.urlencode({"member": leaving})
        fetch(asked, self._token, self._tls_ca, path, "POST")
        self._left = True
        return Fault(kind, leaving, "asked to leave; it stays out of the membership", done=True)

    def end(self, fault: Fault) -> None:
        """Nothing: a leave is done once asked (the cluster moves the data)."""

    def heal(self) -> None:
        """Nothing to undo that the admin API could."""
