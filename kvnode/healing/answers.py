"""A replica's answers to anti-entropy's calls (wire ops BRANCHES, SEGMENTS, LIST): its summary tree for
the caller, and pages of its keys. Called by the replica server (kvnode.node.peer_answers) for those ops."""

from __future__ import annotations

from kvnode.healing.listing import list_page
from kvnode.healing.summary import BRANCHES
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.replica import wire
from kvnode.storage.keyspace import Storage

__all__ = ["REPAIR_OPS", "NotAnswerable", "answer"]

REPAIR_OPS = frozenset({wire.Op.BRANCHES, wire.Op.SEGMENTS, wire.Op.LIST})


class NotAnswerable(Exception):
    """The call cannot be answered now or ever (a FAILED reply with this reason)."""


def answer(storage: Storage, upkeep: SummaryUpkeep, call: wire.CallRequest) -> tuple[wire.Status, bytes]:
    """The reply's status and payload; raises NotAnswerable, wire.WireError, StorageError."""
    if not upkeep.ready.is_set():
        raise NotAnswerable("its summaries are being rebuilt after a crash; try again later")
    summaries = upkeep.summaries
    caller = call.key.decode("utf-8", "replace")
    if caller not in summaries.partial:
        raise NotAnswerable(f"{caller} is not another member of this node's cluster")
    if call.op is wire.Op.LIST:
        cursor, bitmap = wire.decode_list_request(call.record)
        next_cursor, entries = list_page(storage, summaries, caller, cursor, bitmap)
        return wire.Status.LISTING, wire.encode_listing(next_cursor, entries)
    tree = summaries.tree_for(caller)
    if call.op is wire.Op.BRANCHES:
        return wire.Status.HASHES, wire.encode_hashes(tree.branches)
    branches = wire.decode_numbers(call.record)
    if any(branch >= BRANCHES for branch in branches):
        raise wire.WireError(f"a branch number beyond the {BRANCHES} branches")
    return wire.Status.HASHES, wire.encode_hashes(tree.segment_hashes(branches))
