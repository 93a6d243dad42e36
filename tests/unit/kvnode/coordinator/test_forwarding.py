"""kvnode.coordinator.forwarding in-process. First with scripted peers (a coordinator on http://a:1 in east,
http://b:1 and http://c:1 in west, each on real Storage): b's FORWARD handed straight to b's real Relay, which
stores b's copy and relays to c through a scripted replica of its own, so each failure comes on cue: a slow
owner, which holds up no quorum the others make, a forwarder that dies mid-relay, an owner silent past the
forwarder's budget, one the forwarder cannot reach, a malformed reply, a forwarder that speaks an older
protocol; every owner counted, hinted at most once, and none acknowledged lost. Then on nodes served in this
process, over real channels: a write crosses to the other datacenter once, counted by the replica calls of
each node; an old-protocol peer; one datacenter, which never forwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, get_args

import pytest

from kvnode.config import FanoutMode
from kvnode.coordinator.forwarding import Relay
from kvnode.coordinator.forwards import ForwardRequest, decode_outcomes, decode_request, encode_request
from kvnode.coordinator.quorum import Quorum
from kvnode.ops.ports import free_ports
from kvnode.replica import Answered, Replica
from kvnode.replica.channel import wire
from kvnode.replica.channel.protocol import Part
from kvnode.replica.errors import ReplicaUnavailable
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.storage.records import Record
from kvnode.topology.membership import Membership
from tests.drivers import Serve, ServedNode, served_members
from tests.harness import eventually
from tests.replicas import (
    URLS,
    CoordinatorNode,
    ScriptedReplica,
    coordinator_node,
    run_callbacks,
    unjudged_fence,
)

A, B, C = URLS
TWO_DATACENTERS = Membership.seeded(URLS, datacenters=("east", "west", "west"))  # N: east 1, west 2


class ScriptedForwarder:
    """A peer as a forwarder, its FORWARD carried by no channel: handed to ``relay`` (the peer's own Relay)
    at once, and its replies told to the caller (a FORWARDING one as a Part, as the client end resolves
    it). ``die`` fails the FORWARD in flight as a dropped channel does (its replies, if they come later,
    are dropped); ``garbled`` makes the replies ones that do not decode."""

    def __init__(self, url: str, relay: Relay, timeout: float = 1.0) -> None:
        self.url = url
        self.timeout = timeout
        self.distance = 0.0
        self.garbled = False
        self.silent = False  # its FORWARDING replies lost on the way, as a channel about to drop loses them
        self.sent: list[ForwardRequest] = []
        self._relay = relay
        self._waiting: Answered[object] | None = None

    def forward_then(self, key: bytes, request: bytes, answered: Answered[object]) -> None:
        self.sent.append(decode_request(request))
        self._waiting = answered
        self._relay.forward(wire.CallRequest(len(self.sent), wire.Op.FORWARD, key, request), self._replied)

    def _replied(self, status: wire.Status, payload: bytes) -> None:
        answered = self._waiting
        if status is wire.Status.FORWARDED:
            self._waiting = None
        else:
            assert status is wire.Status.FORWARDING
        if answered is not None and not (self.silent and status is wire.Status.FORWARDING):
            payload = b"\x00" if self.garbled else payload
            answered(None, payload if status is wire.Status.FORWARDED else Part(payload))

    def die(self) -> None:
        answered, self._waiting = self._waiting, None
        assert answered is not None, "no FORWARD in flight"
        answered(ReplicaUnavailable(f"{self.url} closed the replica channel"), b"")


class West:
    """The coordinator's node, and the west as its forwarder sees it: ``forwarder`` (b, or c with
    ``through_c``) relays to the other owner through ``relayed``, a scripted replica of that owner's own
    storage, apart from the coordinator's own scripted replica of it (so its writes tell a relayed write
    from a direct one)."""

    def __init__(self, node: CoordinatorNode, through_c: bool = False, timeout: float = 1.0) -> None:
        self.node = node
        forwarder, other = (node.c, node.b) if through_c else (node.b, node.c)
        self.relayed = ScriptedReplica(other.url, node.storages[other.url])
        own = LocalReplica(forwarder.url, node.storages[forwarder.url], unjudged_fence())
        replicas: dict[str, Replica] = {forwarder.url: own, other.url: self.relayed}
        self.forwarder = ScriptedForwarder(forwarder.url, Relay(replicas.get, node.clock.observe), timeout)
        forwarder.forwarder = self.forwarder


@contextmanager
def two_datacenters(
    tmp_path: Path, through_c: bool = False, timeout: float = 1.0, fanout: FanoutMode = "async"
) -> Iterator[West]:
    with coordinator_node(tmp_path, fanout, membership=TWO_DATACENTERS) as node:
        yield West(node, through_c, timeout)


def quorum(node: CoordinatorNode, level: str) -> Quorum:
    return node.coordinator.quorum(level, None)


def holders(node: CoordinatorNode, key: bytes, record: Record) -> list[str]:
    return [url for url in URLS if node.held(url, key) == record]


@pytest.mark.parametrize("fanout", get_args(FanoutMode))
async def test_a_write_crosses_to_the_other_datacenter_once_and_each_owner_is_counted(
    tmp_path: Path, fanout: FanoutMode
) -> None:
    """In every fan-out mode: sync asks the owners one after another, b's call sending the FORWARD and
    c's told its outcome from the same reply."""
    with two_datacenters(tmp_path, fanout=fanout) as west:
        node = west.node
        record = await node.coordinator.put(b"k", b"v", quorum(node, "all"))
        assert holders(node, b"k", record) == URLS
        (request,) = west.forwarder.sent
        assert request.targets == (B, C) and request.record == record and request.budget_s == 0.9
        assert (node.b.writes, node.c.writes, west.relayed.writes) == ([], [], [(b"k", record)])
        assert node.hints.pending_by_target() == {}


async def test_a_large_write_gives_its_forwarder_the_time_to_carry_it_too(tmp_path: Path) -> None:
    """5 MiB take a second more to carry than the timeout alone (kvnode.replica.inflight.carry_s), on
    the coordinator's call and on the forwarder's alike: its budget is 0.9 of the two."""
    with two_datacenters(tmp_path) as west:
        node = west.node
        await node.coordinator.put(b"k", b"v" * 5 * 1024 * 1024, quorum(node, "all"))
        assert west.forwarder.sent[0].budget_s == 1.8


async def test_a_slow_owner_over_there_holds_up_no_quorum_the_others_make(tmp_path: Path) -> None:
    """c is slow to answer b: a quorum of a and b is answered as soon as b's own copy is stored (its
    outcome comes in a reply of its own), not when c answers or the budget ends; c's answer, when it comes,
    counts as a direct write's would (no hint)."""
    with two_datacenters(tmp_path) as west:
        node = west.node
        west.relayed.holding = True
        put = asyncio.ensure_future(node.coordinator.put(b"k", b"v", quorum(node, "quorum")))
        await run_callbacks()
        assert put.done()
        record = put.result()
        assert holders(node, b"k", record) == [A, B]
        west.relayed.release()
        await run_callbacks()
        assert holders(node, b"k", record) == URLS and node.hints.pending_by_target() == {}


@pytest.mark.parametrize("reported", [True, False])
async def test_a_forwarder_that_dies_mid_relay_leaves_the_others_written_directly(
    tmp_path: Path, reported: bool
) -> None:
    """b dies with its relay to c under way: c is written to directly. b's own copy counts if its outcome
    came before (``reported``: every owner answers, ack=all); if not, b fails with the forwarder's error and
    is hinted, once, and the quorum of a and c answers. The relay's write reaches c later all the same (the
    same version: nothing changes), and its answer, which b never sends, counts nowhere."""
    with two_datacenters(tmp_path) as west:
        node = west.node
        west.relayed.holding = True
        west.forwarder.silent = not reported
        level = "all" if reported else "quorum"
        put = asyncio.ensure_future(node.coordinator.put(b"k", b"v", quorum(node, level)))
        await run_callbacks()
        assert west.forwarder.sent and not put.done()
        west.forwarder.die()
        record = await put
        assert [write for write, _ in node.c.writes] == [b"k"] and node.b.writes == []
        hinted = {} if reported else {B: 1}
        assert node.hints.pending_by_target() == hinted
        west.relayed.release()
        await run_callbacks()
        assert holders(node, b"k", record) == URLS  # b stored its own copy before it died
        assert node.hints.pending_by_target() == hinted and len(node.c.writes) == 1


async def test_an_owner_silent_past_the_forwarders_budget_is_answered_timed_out_and_hinted(
    tmp_path: Path,
) -> None:
    with two_datacenters(tmp_path, timeout=0.05) as west:  # a budget of 45 ms
        node = west.node
        west.relayed.holding = True
        record = await node.coordinator.put(b"k", b"v", quorum(node, "quorum"))  # a and b: at once
        assert west.forwarder.sent[0].budget_s == 0.045
        await eventually(
            lambda: node.hints.pending_by_target() == {C: 1}, what="c hinted once the budget ended"
        )
        assert node.c.writes == []
        assert holders(node, b"k", record) == [A, B]
        west.relayed.release()  # the late answer changes nothing: c holds it now, its hint delivers it again
        await run_callbacks()
        assert holders(node, b"k", record) == URLS and node.hints.pending_by_target() == {C: 1}


async def test_an_owner_the_forwarder_cannot_reach_is_written_to_directly(tmp_path: Path) -> None:
    with two_datacenters(tmp_path) as west:
        node = west.node
        west.relayed.connected = False  # no channel from b to c
        record = await node.coordinator.put(b"k", b"v", quorum(node, "all"))
        assert west.relayed.writes == [] and node.c.writes == [(b"k", record)]
        assert holders(node, b"k", record) == URLS and node.hints.pending_by_target() == {}


async def test_an_owner_hinted_at_dispatch_is_hinted_once_whatever_the_forwarder_tells(
    tmp_path: Path,
) -> None:
    """c is not connected from a: hinted before the client is answered, as a direct write would be. The
    forwarder reaches it: the hint is removed. The forwarder fails it: the hint stays, the only one."""
    with two_datacenters(tmp_path) as west:
        node = west.node
        node.c.connected = False
        await node.coordinator.put(b"reached", b"v", quorum(node, "quorum"))
        assert node.hints.pending_by_target() == {} and len(west.relayed.writes) == 1
        west.relayed.fail_with = ReplicaUnavailable(f"{C} is unreachable: refused")
        await node.coordinator.put(b"missed", b"v", quorum(node, "quorum"))
        assert node.hints.pending_by_target() == {C: 1}


async def test_a_reply_that_does_not_decode_fails_the_forwarder_and_the_others_are_written_directly(
    tmp_path: Path,
) -> None:
    with two_datacenters(tmp_path) as west:
        node = west.node
        west.forwarder.garbled = True
        record = await node.coordinator.put(b"k", b"v", quorum(node, "quorum"))
        assert node.c.writes == [(b"k", record)]
        assert node.hints.pending_by_target() == {}  # a protocol error keeps no hint, as for any write


async def test_a_peer_that_speaks_an_older_protocol_is_written_to_directly_or_through_another(
    tmp_path: Path,
) -> None:
    """b speaks no FORWARD: c forwards, relaying to b. With neither able to, both are written to
    directly, as before."""
    with two_datacenters(tmp_path, through_c=True) as west:
        node = west.node
        assert node.b.forwarder is None
        record = await node.coordinator.put(b"k", b"v", quorum(node, "all"))
        assert west.forwarder.sent[0].targets == (C, B)
        assert (node.b.writes, node.c.writes, west.relayed.writes) == ([], [], [(b"k", record)])
        node.c.forwarder = None
        again = await node.coordinator.put(b"k", b"again", quorum(node, "all"))
        assert node.b.writes == node.c.writes == [(b"k", again)] and len(west.forwarder.sent) == 1


async def test_a_write_while_an_owner_there_leaves_reaches_it_through_the_forwarder_too(
    tmp_path: Path,
) -> None:
    """c leaving is no longer in the placement keys are written by, but still an owner a write goes to
    (it is read from until it has left): its datacenter is known all the same, each_quorum counts it in
    the west's, and b relays to it."""
    with coordinator_node(tmp_path, membership=TWO_DATACENTERS.with_leaving(C)) as node:
        west = West(node)
        record = await node.coordinator.put(b"k", b"v", quorum(node, "each_quorum"))
        assert west.forwarder.sent[0].targets == (B, C) and west.relayed.writes == [(b"k", record)]
        assert holders(node, b"k", record) == URLS


async def test_one_datacenter_never_forwards(tmp_path: Path) -> None:
    with coordinator_node(tmp_path) as node:
        nobody: dict[str, Replica] = {}
        forwarder = ScriptedForwarder(B, Relay(nobody.get, node.clock.observe))
        node.b.forwarder = forwarder
        record = await node.coordinator.put(b"k", b"v", quorum(node, "all"))
        assert forwarder.sent == [] and node.b.writes == node.c.writes == [(b"k", record)]


async def test_a_relay_answers_an_owner_it_has_no_member_for_as_not_relayed_and_observes_the_record(
    tmp_path: Path,
) -> None:
    with coordinator_node(tmp_path) as node:
        observed: list[int] = []
        relay = Relay({B: node.b}.get, observed.append)
        replies: list[tuple[wire.Status, bytes]] = []
        record = Record.put(node.clock.now(), b"v")
        request = encode_request(1.0, [B, "http://gone:1"], record)
        relay.forward(
            wire.CallRequest(1, wire.Op.FORWARD, b"k", request), lambda *reply: replies.append(reply)
        )
        await run_callbacks()
        statuses = [status for status, _ in replies]
        assert statuses == [wire.Status.FORWARDING, wire.Status.FORWARDED]  # the unknown owner's at once
        outcomes = dict(outcome for _, payload in replies for outcome in decode_outcomes(payload, 2))
        stored, unknown = outcomes[0], outcomes[1]
        assert stored.relayed and stored.error is None
        assert not unknown.relayed and observed == [record.timestamp]
        with pytest.raises(wire.WireError):
            relay.forward(wire.CallRequest(2, wire.Op.FORWARD, b"k", b"\x00"), lambda *reply: None)


# --- over real channels --------------------------------------------------------------------------------


def calls(node: ServedNode, label: str) -> dict[str, int]:
    """The replica calls ``node`` made to each peer, counted as ``label`` (ok or not)."""
    return {
        peer.url: sum(n for (op, _), n in peer.meter.calls.items() if op == label)
        for peer in node.parts.peers
    }


def peer(node: ServedNode, url: str) -> PeerReplica:
    return next(peer for peer in node.parts.peers if peer.url == url)


SPREAD: dict[str, Any] = {"datacenters": ("east", "east", "west", "west"), "replication_factor": 2}
KEYS = [f"key-{n}".encode() for n in range(6)]


async def test_over_real_channels_a_write_crosses_to_the_other_datacenter_once(serve: Serve) -> None:
    nodes = await served_members(serve, 4, **SPREAD)
    east, near, first_west, second_west = nodes
    coordinator = east.parts.coordinator
    for key in KEYS:
        record = await coordinator.put(key, b"v", coordinator.quorum("each_quorum", None))
        assert all(node.parts.storage.read(key) == record for node in nodes), key
    forwards, writes = calls(east, "forward"), calls(east, "write")
    assert writes == {near.url: len(KEYS), first_west.url: 0, second_west.url: 0}
    assert sum(forwards.values()) == len(KEYS) and forwards[near.url] == 0  # one call to the west a write
    relayed = calls(first_west, "write")[second_west.url] + calls(second_west, "write")[first_west.url]
    assert relayed == len(KEYS)
    assert east.parts.hints.pending_by_target() == {}


async def test_over_real_channels_an_old_protocol_peer_is_relayed_to_and_without_a_forwarder_written_directly(
    serve: Serve,
) -> None:
    """The first of the west speaks protocol 4: the second forwards every write, whichever of the two comes
    first in a key's order, and relays to it; with both at 4 (a second cluster), every owner is written to
    directly, as before."""
    east, near, old, new = await old_west(serve, old=1)
    assert peer(east, old.url).protocol == 4 and peer(east, new.url).protocol == 5
    placement = east.parts.coordinator.placement
    keys = [key for key in (f"key-{n}".encode() for n in range(100)) if placement.owners(key)[2] == old.url][
        :3
    ]
    keys += [key for key in (f"key-{n}".encode() for n in range(100)) if placement.owners(key)[2] == new.url][
        :3
    ]
    assert len(keys) == 6  # three the old one comes first for, three the new one does
    for key in keys:
        await east.parts.coordinator.put(key, b"v", east.parts.coordinator.quorum("all", None))
    assert calls(east, "forward") == {near.url: 0, old.url: 0, new.url: len(keys)}
    assert calls(east, "write")[old.url] == 0 and calls(new, "write")[old.url] == len(keys)
    east, *others = await old_west(serve, old=2)
    for key in KEYS:
        await east.parts.coordinator.put(key, b"v", east.parts.coordinator.quorum("all", None))
    assert sum(calls(east, "forward").values()) == 0
    assert calls(east, "write") == {node.url: len(KEYS) for node in others}


async def old_west(serve: Serve, old: int) -> list[ServedNode]:
    """A cluster of two datacenters of two (east first) whose first ``old`` west members speak protocol 4,
    every channel open."""
    ports = free_ports(4)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    pinned = [0, 0, 4, 4 if old == 2 else 0]
    nodes = [
        await serve(port=port, cluster=members, timeout_ms=500, max_protocol=version, **SPREAD)
        for port, version in zip(ports, pinned, strict=True)
    ]
    for node in nodes:
        for other in node.parts.peers:
            assert await other.reach(5.0)
    return nodes


async def test_over_real_channels_one_datacenter_makes_no_forward(serve: Serve) -> None:
    nodes = await served_members(serve, 3)
    coordinator = nodes[0].parts.coordinator
    for key in KEYS:
        await coordinator.put(key, b"v", coordinator.quorum("all", None))
    assert sum(calls(nodes[0], "forward").values()) == 0
    assert calls(nodes[0], "write") == dict.fromkeys((nodes[1].url, nodes[2].url), len(KEYS))
