"""The membership version each peer runs with, as far as this node heard (a handshake, a fetch, or an offer
it took), and which peers a membership is being compared with: what to do when a peer says its version,
and whether every peer has reached one. Pure; kvnode.cluster.members acts on it.

>>> heard = VersionsHeard()
>>> heard.heard("http://b", 3)
>>> heard.behind(["http://b", "http://c"], 3)      # c has said nothing yet
['http://c']
>>> heard.compare(mine=3, theirs=4), heard.compare(mine=3, theirs=2), heard.compare(mine=3, theirs=3)
('fetch', 'offer', 'none')
>>> heard.begin("http://b"), heard.begin("http://b")  # one exchange with a peer at a time
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

__all__ = ["Comparison", "VersionsHeard"]

Comparison = Literal["fetch", "offer", "none"]


class VersionsHeard:
    def __init__(self) -> None:
        self._versions: dict[str, int] = {}  # as each peer last said, or took from this node
        self._exchanging: set[str] = set()  # peers a membership is being fetched from or offered to

    def heard(self, peer: str, version: int) -> None:
        self._versions[peer] = version

    def behind(self, peers: Iterable[str], version: int) -> list[str]:
        """Those of ``peers`` not known to run with ``version`` or a newer one."""
        return [peer for peer in peers if self._versions.get(peer, 0) < version]

    @staticmethod
    def compare(*, mine: int, theirs: int) -> Comparison:
        """What a node does with a peer running ``theirs``: fetch a newer membership, offer its own to an
        older peer, or nothing."""
        return "fetch" if theirs > mine else "offer" if theirs < mine else "none"

    def begin(self, peer: str) -> bool:
        """Start an exchange with ``peer``; False if one is under way (it will see the newest anyway)."""
        if peer in self._exchanging:
            return False
        self._exchanging.add(peer)
        return True

    def ended(self, peer: str) -> None:
        self._exchanging.discard(peer)
