"""Anti-entropy's summaries kept current: every version storage stores changes them by a delta, a node
that stopped cleanly takes back the trees it saved, and one that did not (a crash, a first start)
rebuilds them from a scan while it serves.

The rebuild reads a snapshot taken at the moment the deltas start to flow: a version stored after it
reaches the trees as a delta, one stored before as a scanned record, and since XOR is commutative and
its own inverse, the trees end up the same whichever comes first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

from kvnode.figures import Figure, Figures, Kind
from kvnode.healing.summary import SegmentTree, Summaries
from kvnode.scheduling import Slice
from kvnode.storage.keyspace import Storage
from kvnode.storage.system_db import SavedSummaries
from kvnode.topology.epoch import Epoch
from kvnode.topology.placement import Placement

__all__ = ["SUMMARY_FIGURES", "SummaryUpkeep"]

# A SummaryUpkeep's figures (kvnode.figures), in /v0/stats's "repair" before anti-entropy's totals.
SUMMARY_FIGURES = Figures("summaries", (
    Figure("ready.is_set", Kind.GAUGE, "0 while the anti-entropy summaries are rebuilt from a scan (after a "
           "crash), else 1", "kvnode_repair_summaries_ready", key="summaries_ready"),
    Figure("rebuilt", Kind.GAUGE, "Records scanned to rebuild the anti-entropy summaries after a crash",
           "kvnode_repair_summaries_rebuilt_records", key="summaries_rebuilt_from"),
), section="repair")  # fmt: skip

log = logging.getLogger(__name__)

_COMMON = "common"


class SummaryUpkeep:
    """Owns a node's :class:`Summaries`: storage's change listener, it keeps them current, rebuilds or
    restores them, saves them."""

    def __init__(self, saved: SavedSummaries, own_url: str, placement: Placement) -> None:
        self.summaries = Summaries(own_url, placement)
        self.ready = asyncio.Event()  # set once the trees can be trusted
        self.rebuilt = 0  # records scanned by the rebuild
        self._storage: Storage | None = None  # the storage followed, once started
        self._saved = saved
        self._stamp = _stamp(own_url, placement)
        self._task: asyncio.Task[None] | None = None
        trees = saved.take(self._stamp)
        if trees is not None and self._restore(trees):
            self.ready.set()

    def changed(self, key: bytes, old: bytes | None, new: bytes | None) -> None:
        """Storage's change listener (give it to Storage.open): a version stored changes the trees."""
        self.summaries.changed(key, old, new)

    def start(self, storage: Storage) -> None:
        """Follow ``storage``, opened with this upkeep's ``changed`` as its listener and not written since,
        and start the rebuild from its scan if the trees need one; call inside the running event loop."""
        self._storage = storage
        if not self.ready.is_set():
            self._scan(storage)

    def _scan(self, storage: Storage) -> None:
        """Rebuild the trees from a snapshot taken now, as deltas flow to them: see the module doc."""
        scan = storage.snapshot_records()
        self._task = asyncio.create_task(self._rebuild(scan), name="summary rebuild")

    def use(self, epoch: Epoch[object]) -> None:
        """Summarise for another membership's placement: which peer shares a key changed, so the trees
        are rebuilt from a scan (not ready meanwhile: exchanges wait). The same placement changes nothing."""
        placement = epoch.placement
        if self.summaries.placement.layout == placement.layout:
            return
        if self._task is not None:
            self._task.cancel()  # a rebuild for the old placement
        self.ready.clear()
        self.summaries = Summaries(self.summaries.own_url, placement)
        self._stamp = _stamp(self.summaries.own_url, placement)
        if self._storage is not None:
            self._scan(self._storage)

    async def stop(self) -> None:
        """Stop the rebuild if it runs; save the trees if they can be trusted, for the next start."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.ready.is_set():
            summaries = self.summaries
            trees = {_COMMON: summaries.common.to_bytes()}
            trees.update({peer: tree.to_bytes() for peer, tree in summaries.partial.items()})
            self._saved.save(self._stamp, trees)

    def _restore(self, trees: dict[str, bytes]) -> bool:
        summaries = self.summaries
        if set(trees) != {_COMMON, *summaries.peers}:
            return False
        summaries.common = SegmentTree.from_bytes(trees[_COMMON])
        summaries.partial = {peer: SegmentTree.from_bytes(trees[peer]) for peer in summaries.peers}
        return True

    async def _rebuild(self, scan: Iterator[tuple[bytes, bytes]]) -> None:
        started = time.monotonic()
        changed = self.summaries.changed
        share = Slice()  # client traffic goes in between: a record costs tens of µs, 2000 held it 170 ms
        count = 0
        for key, record in scan:
            changed(key, None, record)
            count += 1
            self.rebuilt = count
            await share.pause()
        self.ready.set()
        if count:  # a new data dir has nothing to say (and a node that cannot listen says one line)
            seconds = time.monotonic() - started
            log.info("rebuilt the anti-entropy summaries from %d records in %.1f s", count, seconds)


def _stamp(own_url: str, placement: Placement) -> bytes:
    """What saved trees were built for: this node and the placement's layout (the members, with their
    tokens, and N; with zones and datacenters, those too)."""
    return "\n".join((own_url, *placement.layout)).encode()
