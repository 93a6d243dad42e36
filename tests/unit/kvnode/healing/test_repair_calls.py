"""kvnode.healing.repair_calls: a replica's answers to anti-entropy's calls (BRANCHES, SEGMENTS, LIST)
from its summary tree for the caller and its store, and the calls it cannot answer; real stores
(tests/drivers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kvnode.healing.listing import list_page, segment_bitmap
from kvnode.healing.repair_calls import RepairCalls
from kvnode.healing.summary import BRANCHES, SEGMENTS
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers, Unanswerable
from kvnode.storage.keyspace import Storage
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership
from tests.drivers import InProcessNode, in_process_nodes

CALLER = "http://n2:8080"


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[InProcessNode]:
    """The first of two in-process members, holding a few keys, its summaries ready."""
    async with in_process_nodes(tmp_path, 2) as nodes:
        await asyncio.wait_for(nodes[0].upkeep.ready.wait(), 30)
        for index in range(20):
            nodes[0].put(f"key-{index}", b"value")
        yield nodes[0]


def call(op: wire.Op, record: bytes = b"", caller: str = CALLER) -> wire.CallRequest:
    return wire.CallRequest(1, op, caller.encode(), record)


def answered(node: InProcessNode, request: wire.CallRequest) -> tuple[wire.Status, bytes]:
    return RepairCalls(node.storage, node.upkeep).answer(request)


async def test_it_answers_the_exchange_s_three_calls(node: InProcessNode) -> None:
    answerers = Answerers()
    RepairCalls(node.storage, node.upkeep).register(answerers)
    assert answerers.unanswered == set(wire.Op) - {wire.Op.BRANCHES, wire.Op.SEGMENTS, wire.Op.LIST}


async def test_branches_are_the_callers_trees_branch_hashes(node: InProcessNode) -> None:
    status, payload = answered(node, call(wire.Op.BRANCHES))
    tree = node.upkeep.summaries.tree_for(CALLER)
    assert status is wire.Status.HASHES
    assert wire.decode_hashes(payload) == list(tree.branches) and any(tree.branches)


async def test_segments_are_the_hashes_of_the_branches_asked(node: InProcessNode) -> None:
    status, payload = answered(node, call(wire.Op.SEGMENTS, wire.encode_numbers([0, 7])))
    tree = node.upkeep.summaries.tree_for(CALLER)
    assert status is wire.Status.HASHES
    assert wire.decode_hashes(payload) == tree.segment_hashes([0, 7])
    with pytest.raises(wire.WireError, match=f"beyond the {BRANCHES} branches"):
        answered(node, call(wire.Op.SEGMENTS, wire.encode_numbers([BRANCHES])))


async def test_a_listing_is_the_page_listed_for_the_caller(node: InProcessNode) -> None:
    bitmap = segment_bitmap(range(SEGMENTS))
    status, payload = answered(node, call(wire.Op.LIST, wire.encode_list_request(b"", bitmap)))
    expected = list_page(node.storage, node.upkeep.summaries, CALLER, b"", bitmap)
    assert status is wire.Status.LISTING
    assert wire.decode_listing(payload) == expected and len(expected[1]) == 20


async def test_a_caller_that_is_not_another_member_is_not_answered(node: InProcessNode) -> None:
    for stranger in ("http://elsewhere:8080", node.url):
        with pytest.raises(Unanswerable, match=f"^{stranger} is not another member of this node's cluster$"):
            answered(node, call(wire.Op.BRANCHES, caller=stranger))


async def test_nothing_is_answered_while_the_summaries_are_rebuilt(tmp_path: Path) -> None:
    storage, system = Storage.open(tmp_path, fsync=False), SystemDb.open(tmp_path)
    try:
        placement = Membership.seeded(["http://n1:8080", CALLER]).placement()
        rebuilding = SummaryUpkeep(system.summaries, "http://n1:8080", placement)  # not started
        with pytest.raises(Unanswerable, match="being rebuilt after a crash; try again later"):
            RepairCalls(storage, rebuilding).answer(call(wire.Op.BRANCHES))
    finally:
        system.close()
        storage.close()
