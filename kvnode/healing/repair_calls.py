"""The replica calls of anti-entropy's exchanges answered by this node (ops BRANCHES, SEGMENTS, LIST): its
summary tree for the caller, and pages of its keys; registered with the channel's server end
(kvnode.replica.channel.answerers) when the node is wired. The caller's end is kvnode.healing.anti_entropy."""

from __future__ import annotations

from kvnode.healing.listing import list_page
from kvnode.healing.summary import BRANCHES
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answer, Answerers, Unanswerable
from kvnode.storage.keyspace import Storage

__all__ = ["RepairCalls"]


class RepairCalls:
    """How this node answers a peer's repair exchange with it: from its summaries and its store. The key
    of each call is the caller's URL, whose summary tree is meant."""

    __slots__ = ("_storage", "_upkeep")

    def __init__(self, storage: Storage, upkeep: SummaryUpkeep) -> None:
        self._storage = storage
        self._upkeep = upkeep

    def register(self, answerers: Answerers) -> None:
        for op in (wire.Op.BRANCHES, wire.Op.SEGMENTS, wire.Op.LIST):
            answerers.register(op, self.answer)

    def answer(self, call: wire.CallRequest) -> Answer:
        """The reply's status and payload; raises Unanswerable, wire.WireError, StorageError."""
        upkeep = self._upkeep
        if not upkeep.ready.is_set():
            raise Unanswerable("its summaries are being rebuilt after a crash; try again later")
        summaries = upkeep.summaries
        caller = call.key.decode("utf-8", "replace")
        if caller not in summaries.partial:
            raise Unanswerable(f"{caller} is not another member of this node's cluster")
        if call.op is wire.Op.LIST:
            cursor, bitmap = wire.decode_list_request(call.record)
            next_cursor, entries = list_page(self._storage, summaries, caller, cursor, bitmap)
            return wire.Status.LISTING, wire.encode_listing(next_cursor, entries)
        tree = summaries.tree_for(caller)
        if call.op is wire.Op.BRANCHES:
            return wire.Status.HASHES, wire.encode_hashes(tree.branches)
        branches = wire.decode_numbers(call.record)
        if any(branch >= BRANCHES for branch in branches):
            raise wire.WireError(f"a branch number beyond the {BRANCHES} branches")
        return wire.Status.HASHES, wire.encode_hashes(tree.segment_hashes(branches))
