"""kvnode.paxos.rounds on nodes served in this process (their acceptors over real channels on loopback):
a conditional write applied, or not applied with the current version, a serial read; with one owner of
three down a round still finishes and the commit is hinted for it, with two down it is Unknown within the
timeout; an owner whose channel speaks a protocol without the round's calls refuses the round; rounds
contending on one key from every node each end in an outcome, no two applied increments built on the
same count."""

from __future__ import annotations

import asyncio

import pytest

from kvnode.ops.ports import free_ports
from kvnode.paxos.conditions import IfAbsent, IfMatch, etag
from kvnode.paxos.proposer import Applied, NotApplied, Read, Unknown, Write
from kvnode.paxos.rounds import PaxosUnsupported
from kvnode.storage.records import Record
from tests.drivers import Serve, ServedNode, served_members

KEY = b"counter"


async def test_a_conditional_write_is_applied_or_not_and_a_serial_read_sees_it(serve: Serve) -> None:
    first, second, _ = await served_members(serve, 3, 3)
    created = await first.parts.paxos.write(KEY, Write.put(b"1"), IfAbsent())
    assert isinstance(created, Applied) and created.record.value == b"1"
    again = await second.parts.paxos.write(KEY, Write.put(b"2"), IfAbsent())
    assert again == NotApplied(created.record)
    stale = await second.parts.paxos.write(KEY, Write.put(b"2"), IfMatch("0" * 32))
    assert stale == NotApplied(created.record)
    updated = await second.parts.paxos.write(KEY, Write.put(b"2"), IfMatch(etag(created.record)))
    assert isinstance(updated, Applied)
    assert await first.parts.paxos.read(KEY) == Read(updated.record)
    assert first.parts.paxos.stats.rounds == {"applied": 1, "not_applied": 0, "read": 1, "unknown": 0}


async def test_one_owner_down_a_round_finishes_and_its_commit_is_hinted(serve: Serve) -> None:
    first, second = await served_members(serve, 3, 2)
    down = next(url for url in first.parts.membership.urls if url not in (first.url, second.url))
    applied = await first.parts.paxos.write(KEY, Write.put(b"v"), IfAbsent())
    assert isinstance(applied, Applied)
    assert first.parts.hints.pending(down) == 1  # before the round answered: it was not connected
    assert await second.parts.paxos.read(KEY) == Read(applied.record)


async def test_two_owners_down_a_round_is_unknown_within_the_timeout(serve: Serve) -> None:
    (only,) = await served_members(serve, 3, 1)
    only.clock_checked()  # its peers went down after they answered
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await only.parts.paxos.write(KEY, Write.put(b"v"), IfAbsent())
    assert isinstance(outcome, Unknown) and "no quorum in the prepare phase" in outcome.reason
    assert loop.time() - started < 2.0  # the node's timeout is 0.5 s
    assert only.parts.paxos.stats.rounds["unknown"] == 1


async def test_an_owner_speaking_an_older_protocol_refuses_the_round(serve: Serve) -> None:
    ports = free_ports(2)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    new = await serve(port=ports[0], cluster=members, timeout_ms=500)
    await serve(port=ports[1], cluster=members, timeout_ms=500, max_protocol=3)
    assert await new.parts.peers[0].reach(5.0) and new.parts.peers[0].protocol == 3
    with pytest.raises(PaxosUnsupported, match="speaks an older one: finish the rolling upgrade"):
        await new.parts.paxos.write(KEY, Write.put(b"v"), IfAbsent())
    assert new.parts.paxos.stats.unsupported == 1


async def test_contending_rounds_each_end_and_the_applied_ones_are_every_increment(serve: Serve) -> None:
    nodes = await served_members(serve, 3, 3)
    applied: list[Record] = []
    unknown = 0

    async def increment(node: ServedNode) -> None:
        nonlocal unknown
        for _ in range(20):
            read = await node.parts.paxos.read(KEY)
            if not isinstance(read, Read):
                continue
            current = read.current
            count = 0 if current is None else int(current.value)
            condition = IfAbsent() if current is None else IfMatch(etag(current))
            outcome = await node.parts.paxos.write(KEY, Write.put(str(count + 1).encode()), condition)
            if isinstance(outcome, Applied):
                applied.append(outcome.record)
            unknown += isinstance(outcome, Unknown)

    await asyncio.gather(*(increment(node) for node in nodes))
    final = await nodes[0].parts.paxos.read(KEY)
    assert isinstance(final, Read) and final.current is not None
    # No two applied increments built on the same count (a lost update), and the key holds every one of
    # them: at least the highest, at most one more for each round whose outcome was unknown.
    values = sorted(int(record.value) for record in applied)
    assert len(set(values)) == len(values) > 0, values
    assert values[-1] <= int(final.current.value) <= len(values) + unknown


async def test_a_round_needs_a_majority_of_all_the_keys_owners_across_datacenters(serve: Serve) -> None:
    """Two datacenters of two, N = 2 in each: a key's four owners. The east alone (two of four) is no
    majority, whatever its own datacenter holds; one more owner from the west is."""
    spread = {"datacenters": ("east", "east", "west", "west"), "replication_factor": 2}
    east, _ = await served_members(serve, 4, 2, **spread)
    east.clock_checked()
    assert east.parts.membership.placement().replication == 4
    outcome = await east.parts.paxos.write(KEY, Write.put(b"v"), IfAbsent())
    assert isinstance(outcome, Unknown) and "no quorum in the prepare phase" in outcome.reason
    writer, *_ = await served_members(serve, 4, 3, **spread)
    assert isinstance(await writer.parts.paxos.write(KEY, Write.put(b"v"), IfAbsent()), Applied)
