"""In-process nodes for the background drivers' tests (anti-entropy, tombstone GC, rebuild, the membership
and a node's part in a change): each a real Storage, SystemDb, summaries, clock and local replica in a
temporary directory; a peer that answers another in-process node's replica calls directly (no socket); and
a sleep that lets no real time pass, so a driver's retries and paces run at once. And whole nodes served
in this process (:func:`served_nodes`, :func:`served_members` for a cluster of them), for the tests of a
node's endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
import plyvel
from aiohttp import web

from kvnode.access.connections import GuardedRunner
from kvnode.clocks.hybrid import HybridClock, wall_clock_us
from kvnode.clocks.offsets import Offset
from kvnode.cluster.changes import make_as_member
from kvnode.cluster.members import Members
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.healing.repair_calls import RepairCalls
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.loop_lag import Starvation
from kvnode.memory import Settler
from kvnode.node.app import create_app
from kvnode.node.parts import NodeParts
from kvnode.node.wiring import open_parts
from kvnode.ops.ports import free_ports
from kvnode.replica import pages
from kvnode.replica.channel import wire
from kvnode.replica.errors import ReplicaRejected, ReplicaUnavailable
from kvnode.replica.hints import HintStore
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record, decode
from kvnode.storage.system_db import SystemDb
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership
from tests.harness import node_config
from tests.replicas import unjudged_fence


class FailingWrites:
    """A LevelDB whose writes fail as on a full disk (its reads go on): put it in place of a Storage's."""

    def __init__(self, db: plyvel.DB, reason: bytes = b"IO error: No space left on device") -> None:
        self._db, self._reason = db, reason

    def write_batch(self, **_: object) -> None:
        raise plyvel.IOError(self._reason)

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


class PassedSizes(Settler):
    """A settler that keeps the size of every value it is told passed (it is never started)."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def passed(self, size: int) -> None:
        self.sizes.append(size)


class NoWait:
    """A driver's ``sleep`` that returns at once (after one turn of the loop) and keeps what was asked."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await asyncio.sleep(0)


@dataclass
class InProcessNode:
    """What a node's drivers stand on, without its server: ``peers`` are InProcessPeers to the others."""

    url: str
    storage: Storage
    system: SystemDb
    clock: HybridClock
    local: LocalReplica
    membership: Membership
    upkeep: SummaryUpkeep
    sleep: NoWait = field(default_factory=NoWait)
    peers: dict[str, InProcessPeer] = field(default_factory=dict)
    members: Members | None = None

    def put(self, key: str, value: bytes, *, tombstone: bool = False) -> Record:
        """Store a version stamped now, as a replica write would."""
        record = Record(self.clock.now(), tombstone, b"" if tombstone else value)
        self.storage.apply(key.encode(), record)
        return record

    def anti_entropy(self, starvation: Starvation | None = None, remote_rate: int = 0) -> AntiEntropy:
        """Its anti-entropy, as fast as can be (with a peer in another datacenter: ``remote_rate``, 0 the
        same), told its epoch."""
        driver = AntiEntropy(
            self.url,
            self.upkeep,
            self.storage,
            self.local,
            list(self.epoch().peers.values()),
            self.clock,
            self.system.repair_marks,
            interval_s=60.0,
            rate=1_000_000,
            remote_rate=remote_rate,
            sleep=self.sleep,
            starvation=starvation,
        )
        driver.use(self.epoch())
        return driver

    def epoch(self) -> Epoch[PeerReplica]:
        """The epoch this node runs with at first: its membership and a peer to every other member."""
        others = {url: self.peer(url) for url in self.membership.urls if url != self.url}
        return Epoch(self.url, self.membership, others, since=0)

    def peer(self, url: str) -> PeerReplica:
        return cast(PeerReplica, self.peers[url])

    def open_members(self) -> Members:
        """This node's Members, its peers the InProcessPeers (hints kept in its own system database)."""
        hints = HintStore(self.system.hints, fsync=False, max_per_peer=1000, window_s=3600, grace_s=86400)
        stored = self.system.membership
        self.members = Members(self.url, self.membership, stored, hints, self.peer, self.clock.current)
        return self.members


class InProcessPeer:
    """Another in-process node as a PeerReplica: anti-entropy's calls answered from its summaries and
    storage, a scan's pages from its storage, writes through its local replica, memberships fetched from
    and offered to its Members (the first membership until it has Members). ``reachable`` False makes
    every call fail as a down peer's."""

    def __init__(self, theirs: InProcessNode, mine: InProcessNode) -> None:
        self.url = theirs.url
        self.theirs = theirs
        self.mine = mine
        self.reachable = True

    async def reach(self, wait_s: float) -> bool:
        return self.reachable

    def probe(self) -> None:
        """A handshake: the caller's Members hears the version this peer runs with."""
        if self.reachable and self.mine.members is not None:
            theirs = (
                self.theirs.members.membership if self.theirs.members is not None else self.theirs.membership
            )
            self.mine.members.heard_version(self.url, theirs.version)

    @property
    def refusal(self) -> str:
        return "" if self.reachable else "connection refused"

    def call(self, op: wire.Op, key: bytes, record: bytes = b"", *, label: str) -> asyncio.Future[object]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if not self.reachable:
            future.set_exception(ReplicaUnavailable(f"{self.url} is down"))
        elif op in (wire.Op.BRANCHES, wire.Op.SEGMENTS, wire.Op.LIST):
            call = wire.CallRequest(1, op, key, record)
            future.set_result(RepairCalls(self.theirs.storage, self.theirs.upkeep).answer(call)[1])
        elif op is wire.Op.FETCH:
            future.set_result(self.theirs.storage.read(key))
        elif op is wire.Op.SCAN:
            page = pages.read_page(self.theirs.storage, key, pages.decode_scan_request(record))
            future.set_result(pages.encode_page(*page))
        else:
            assert op is wire.Op.WRITE
            written = self.theirs.local.write(key, decode(record))
            written.add_done_callback(lambda done: future.set_result(done.result()))
        return future

    async def fetch_membership(self) -> bytes:
        self._check()
        members = self.theirs.members
        return (members.membership if members is not None else self.theirs.membership).encode()

    async def offer_membership(self, encoded: bytes) -> None:
        self._check()
        members = self.theirs.members
        if members is None:
            raise ReplicaUnavailable(f"{self.url} runs no membership here")
        offered = Membership.decode(encoded)
        try:
            if offered != members.membership:  # the same one again is taken, as a node's server does
                members.adopt(offered)
        except Exception as refusal:
            raise ReplicaRejected(f"{self.url}: {refusal}") from None

    async def close(self) -> None:
        pass

    def _check(self) -> None:
        if not self.reachable:
            raise ReplicaUnavailable(f"{self.url} is down")


@contextlib.asynccontextmanager
async def in_process_nodes(
    tmp_path: Path,
    count: int,
    members: int = 0,
    replication: int = 0,
    storage_now_s: Callable[[], float] = time.monotonic,
    datacenters: Sequence[str] = (),
) -> AsyncIterator[list[InProcessNode]]:
    """``count`` in-process nodes (http://n1:8080 ...), each with a peer to every other; the first
    ``members`` of them (all by default) are the first membership, with ``replication`` owners a key (0: every
    member) and those members' ``datacenters`` (by default one); their storage reads ``storage_now_s`` for
    when it may open its database again after a failed write. Call inside the running event loop; the
    Members a test opened are closed at the end."""
    urls = [f"http://n{index}:8080" for index in range(1, count + 1)]
    membership = Membership.seeded(urls[: members or count], replication, datacenters=datacenters)
    nodes: list[InProcessNode] = []
    async with contextlib.AsyncExitStack() as stack:
        for index, url in enumerate(urls, 1):
            directory = tmp_path / f"n{index}"
            system = SystemDb.open(directory)
            stack.callback(system.close)
            upkeep = SummaryUpkeep(system.summaries, url, membership.placement())
            storage = Storage.open(directory, fsync=False, on_change=upkeep.changed, now_s=storage_now_s)
            stack.callback(storage.close)
            clock = HybridClock(wall_clock_us(), 5_000_000)
            local = LocalReplica(url, storage, unjudged_fence())
            upkeep.start(storage)  # the trees of an empty store, built at once
            stack.push_async_callback(upkeep.stop)  # before its storage closes
            nodes.append(InProcessNode(url, storage, system, clock, local, membership, upkeep))
        for node in nodes:
            node.peers = {other.url: InProcessPeer(other, node) for other in nodes if other is not node}
        try:
            yield nodes
        finally:
            for node in nodes:  # the membership drivers a test opened, before their storage closes
                if node.members is not None:
                    await node.members.close()


async def claim_join(old: list[InProcessNode], newcomer: InProcessNode) -> Membership:
    """The members ``old`` (their Members opened) run with ``newcomer`` joining, as its claim leaves them:
    made from the first, the claimant first."""
    for node in old:
        node.open_members()
    members = old[0].members
    assert members is not None
    joining = members.membership.with_joining(newcomer.url)
    await make_as_member(members, joining)
    assert all(node.members is not None and node.members.membership == joining for node in old)
    return joining


async def until(condition: Callable[[], bool], what: str, turns: int = 100_000) -> None:
    """Let the loop run until ``condition`` holds (a bounded number of turns: no real time is waited for)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what}: not after {turns} turns of the loop")


@dataclass
class ServedNode:
    """A node served in this process: its parts, the URL it serves on, and a client session to it."""

    parts: NodeParts
    url: str
    session: aiohttp.ClientSession

    async def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        async with self.session.request(method, self.url + path, data=body) as response:
            return response.status, await response.read()

    async def put(self, key: str, value: bytes) -> None:
        status, answer = await self.call("PUT", f"/v0/entity?id={key}", value)
        assert status == 201, answer

    def clock_checked(self) -> None:
        """As if every peer had answered a clock call, within the skew, before it went down: a node whose
        peers have never answered since it started refuses to stamp writes (kvnode.clocks.fence)."""
        for peer in self.parts.peers:
            self.parts.fence.measured(peer.url, Offset(0, 0))


Serve = Callable[..., Awaitable[ServedNode]]


async def served_members(
    serve: Serve, size: int, served: int | None = None, **options: Any
) -> list[ServedNode]:
    """The first ``served`` (default: all) members of a cluster of ``size`` served by ``serve`` (the others
    never answer), each channel to a served peer open; ``options`` as NodeConfig's (a 500 ms
    ``timeout_ms`` unless given)."""
    ports = free_ports(size)
    members = tuple(f"http://127.0.0.1:{port}" for port in ports)
    options.setdefault("timeout_ms", 500)
    nodes = [await serve(port=port, cluster=members, **options) for port in ports[:served]]
    urls = {node.url for node in nodes}
    for node in nodes:
        for peer in node.parts.peers:
            if peer.url in urls:
                assert await peer.reach(5.0)
    return nodes


@contextlib.asynccontextmanager
async def served_nodes(tmp_path: Path) -> AsyncIterator[Serve]:
    """serve(**NodeConfig options) -> a node with its own data dir under ``tmp_path``, served as
    kvnode.node.serving serves one (its parts, its app, through the connection guard) until the block ends:
    on its ``port`` when the options name one (a member its peers reach), else on any free port."""
    started = itertools.count()
    async with contextlib.AsyncExitStack() as stack:

        async def serve(**options: Any) -> ServedNode:
            data_dir = tmp_path / f"node-{next(started)}"
            parts = await stack.enter_async_context(open_parts(node_config(data_dir=data_dir, **options)))
            runner = GuardedRunner(create_app(parts), parts.connections, parts.config.idle_timeout_s)
            await runner.setup()
            stack.push_async_callback(runner.cleanup)
            await web.TCPSite(runner, "127.0.0.1", options.get("port", 0)).start()
            session = await stack.enter_async_context(aiohttp.ClientSession())
            host, port = runner.addresses[0][:2]
            return ServedNode(parts, f"http://{host}:{port}", session)

        yield serve
