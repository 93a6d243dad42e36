"""kvnode.healing.rebuild's driver in-process: a node whose disk was lost learns it from a peer's
introduction, repairs with every peer through anti-entropy (the peers in-process), retries a peer that is
down at the paced interval, and serves once every peer is done. (The state machine alone is
tests/unit/kvnode/healing/test_rebuild_state.py; tests/cluster/test_rebuild.py wipes real nodes.)"""

from __future__ import annotations

from pathlib import Path

from kvnode.healing.rebuild import Rebuild
from kvnode.replica.channel.handshake import Introduction
from kvnode.replica.readiness import NodeState
from kvnode.topology.epoch import Epoch
from tests.drivers import in_process_nodes, until


async def test_a_node_that_lost_its_disk_rebuilds_from_every_peer_then_serves(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (wiped, two, three):
        await until(lambda: all(n.upkeep.ready.is_set() for n in (wiped, two, three)), "summaries built")
        for index in range(20):
            both = two.put(f"key-{index}", b"value")
            three.storage.apply(f"key-{index}".encode(), both)
        three.put("only-three", b"value")
        rebuild = Rebuild(wiped.system.identity, 3, retry_s=1.0, sleep=wiped.sleep)
        assert rebuild.node_state() is NodeState.UNKNOWN
        rebuild.peer_met(two.url, Introduction(identity="b", remembered="the-identity-it-had-before"))
        assert rebuild.node_state() is NodeState.REBUILDING
        assert wiped.system.identity.saved_state() == "rebuilding"  # saved before acting on it

        three_peer = wiped.peers[three.url]
        three_peer.reachable = False
        anti_entropy = wiped.anti_entropy()
        rebuild.use(wiped.epoch())  # the members it rebuilds from
        rebuild.start(anti_entropy)
        await until(lambda: rebuild.progress.attempts >= 2, "a second attempt")
        assert rebuild.node_state() is NodeState.REBUILDING
        assert rebuild.progress.waiting_for == {three.url: "unreachable"}
        assert wiped.sleep.asked[:1] == [1.0]  # the retry pace, through the driver's sleep

        three_peer.reachable = True
        await until(lambda: rebuild.node_state() is NodeState.SERVING, "serving")
        assert wiped.system.identity.saved_state() == ""
        assert rebuild.progress.records_received == 21
        assert wiped.storage.read(b"only-three") is not None
        await rebuild.stop()
        await anti_entropy.stop()


async def test_a_new_member_that_no_peer_knew_serves_at_once(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 2) as (new, other):
        rebuild = Rebuild(new.system.identity, 2, sleep=new.sleep)
        rebuild.peer_met(other.url, Introduction(identity="b"))
        assert rebuild.node_state() is NodeState.SERVING
        rebuild.start(new.anti_entropy())  # nothing to do: no task is started
        await rebuild.stop()


async def test_a_member_that_left_meanwhile_is_no_longer_waited_for(tmp_path: Path) -> None:
    async with in_process_nodes(tmp_path, 3) as (wiped, two, gone):
        await until(lambda: all(n.upkeep.ready.is_set() for n in (wiped, two, gone)), "summaries built")
        rebuild = Rebuild(wiped.system.identity, 3, sleep=wiped.sleep)
        rebuild.peer_met(two.url, Introduction(identity="b", remembered="the-identity-it-had-before"))
        wiped.peers[gone.url].reachable = False
        anti_entropy = wiped.anti_entropy()
        rebuild.use(wiped.epoch())
        rebuild.start(anti_entropy)
        await until(lambda: rebuild.progress.waiting_for == {gone.url: "unreachable"}, "waiting for it")

        without = wiped.membership.with_leaving(gone.url).removed(gone.url)
        rebuild.use(Epoch(wiped.url, without, {two.url: wiped.peer(two.url)}, since=1))
        await until(lambda: rebuild.node_state() is NodeState.SERVING, "serving")
        assert rebuild.progress.done == {two.url}
        await rebuild.stop()
        await anti_entropy.stop()
