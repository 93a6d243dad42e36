"""Anti-entropy at work: drives exchanges (kvnode.healing.exchange) with the peers, continuously at a
throttled pace, and on demand (``admin repair``), and records each completed one.

Every peer is compared at least every ``--repair-interval-s``; the exchanges of one node run one at a
time. Records move at ``--repair-rate`` per second at most (sent and received together), and with a peer
in another datacenter at ``--remote-repair-rate``, paced apart (a WAN's bandwidth is not a LAN's), a window
of them at a time through the same replica channel and the same checks as any write (the clock fence's on
both ends, newest version wins), and a node's own listing yields to the event loop after every page, so
client traffic keeps its share of the loop and of the channel's bounds; while the loop is busy, each page
and each window waits for a calm tick (kvnode.loop_lag.Starvation): repair yields to client traffic.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence

from kvnode.clocks.hybrid import HybridClock
from kvnode.healing.exchange import Exchange, Moves, Step
from kvnode.healing.listing import list_page, segment_bitmap
from kvnode.healing.outcomes import PeerOutcome, RepairRun, RepairTotals
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.loop_lag import Starvation
from kvnode.replica.channel import wire
from kvnode.replica.errors import ReplicaError, ReplicaSkewRefused
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.scheduling import Sleep, Tasks
from kvnode.storage.keyspace import Storage, StorageError
from kvnode.storage.records import CorruptRecord, Record, encode
from kvnode.storage.system_db import RepairMarks
from kvnode.topology.epoch import Epoch

__all__ = ["AntiEntropy"]

log = logging.getLogger(__name__)

_WINDOW = 64  # records moved at once
_CONNECT_WAIT_S = 2.0  # how long an exchange waits for a peer's channel before calling it unreachable


class AntiEntropy:
    def __init__(
        self,
        own_url: str,
        upkeep: SummaryUpkeep,
        storage: Storage,
        local: LocalReplica,
        peers: Sequence[PeerReplica],
        clock: HybridClock,
        marks: RepairMarks,
        *,
        interval_s: float,
        rate: int,
        remote_rate: int = 0,  # with a peer in another datacenter (0: ``rate``)
        sleep: Sleep = asyncio.sleep,
        starvation: Starvation | None = None,
    ) -> None:
        self._me = own_url.encode()
        self._upkeep = upkeep
        self._storage = storage
        self._local = local
        self.peers = tuple(peers)
        self._clock = clock
        self._marks = marks
        self._interval_s = interval_s
        self._one_at_a_time = asyncio.Lock()
        self._pace_near = _Pace(rate)
        self._pace_far = _Pace(remote_rate or rate)
        self._far: frozenset[str] = frozenset()  # the peers in another datacenter than this node's
        self.totals = RepairTotals()
        self.run: RepairRun | None = None  # the last on-demand repair, or the one running
        self.current: PeerOutcome | None = None  # the exchange under way, as it progresses
        self._tasks = Tasks("anti-entropy", sleep)
        self._starvation = starvation if starvation is not None else Starvation()
        self._started = False

    # --- continuous and on demand -----------------------------------------------------------------

    def start(self) -> None:
        """Start the continuous comparisons; call inside the running event loop."""
        if self.peers and self._tasks.named("continuous") is None:
            self._tasks.spawn(self._continuously(), "continuous")
        self._started = True

    def use(self, epoch: Epoch[PeerReplica]) -> None:
        """Compare with another membership's peers from the next exchange on (a cluster of one that
        grew starts comparing now)."""
        self.peers = tuple(epoch.peers.values())
        membership, home = epoch.membership, epoch.datacenter
        self._far = frozenset(url for url in epoch.peers if membership.datacenter_of(url) != home)
        if self._started:
            self.start()

    async def stop(self) -> None:
        await self._tasks.stop()

    def request_run(self) -> RepairRun:
        """Start a full repair with every peer unless one runs; the run (new or running)."""
        if not self._tasks.running("repair"):
            self.run = RepairRun(tuple(peer.url for peer in self.peers))
            self._tasks.spawn(self._full(self.run), "repair")
        assert self.run is not None
        return self.run

    async def repair_all(self) -> RepairRun:
        """A full repair with every peer, now (or the one running); returns when it is done."""
        self.request_run()
        task = self._tasks.named("repair")
        assert task is not None
        return await asyncio.shield(task)

    async def _full(self, run: RepairRun) -> RepairRun:
        for peer in self.peers:
            run.current = peer.url
            run.outcomes[peer.url] = await self.repair_with(peer)
        run.current = ""
        run.ended = time.monotonic()
        log.info("%s", run.summary())
        return run

    async def _continuously(self) -> None:
        await self._tasks.sleep(random.uniform(0, self._interval_s / len(self.peers)))  # nodes spread apart
        while True:
            step = self._interval_s / max(1, len(self.peers))
            for peer in self.peers:
                outcome = await self.repair_with(peer)
                if not outcome.completed:
                    log.info("anti-entropy with %s did not complete: %s", peer.url, outcome.reason)
                elif outcome.sent or outcome.received:
                    log.info(
                        "anti-entropy with %s: %d segments differed, %d records sent, %d received",
                        peer.url, outcome.segments_differing, outcome.sent, outcome.received,
                    )  # fmt: skip
                await self._tasks.sleep(step)

    # --- one exchange -----------------------------------------------------------------------------

    async def repair_with(self, peer: PeerReplica) -> PeerOutcome:
        """One exchange with ``peer``; recorded (kvnode.storage.system_db.RepairMarks) when it completes."""
        async with self._one_at_a_time:
            outcome = self.current = PeerOutcome(peer.url)
            began = time.monotonic()
            try:
                await self._exchange(peer, outcome)
            except (ReplicaError, wire.WireError, StorageError) as error:
                outcome.reason = str(error)
            finally:
                self.current = None
            outcome.seconds = time.monotonic() - began
            self._count(outcome)
            return outcome

    async def _exchange(self, peer: PeerReplica, outcome: PeerOutcome) -> None:
        if not self._upkeep.ready.is_set():
            outcome.reason = "this node's summaries are being rebuilt after a crash"
            return
        if not await peer.reach(_CONNECT_WAIT_S):
            outcome.reason = "unreachable"
            return
        summaries = self._upkeep.summaries
        if peer.url not in summaries.partial:  # it left the membership since the exchange was planned
            outcome.reason = "no longer a member"
            return
        started = self._clock.now()  # what this node holds from here on, the peer will hold too
        exchange = Exchange(peer.url, summaries.tree_for(peer.url))
        exchange.branches_answered(wire.decode_hashes(await self._ask(peer, wire.Op.BRANCHES)))
        if exchange.step is Step.SEGMENTS:
            numbers = wire.encode_numbers(exchange.branches)
            exchange.segments_answered(wire.decode_hashes(await self._ask(peer, wire.Op.SEGMENTS, numbers)))
        outcome.segments_compared = exchange.segments_compared
        outcome.segments_differing = exchange.segments_differing
        while exchange.step is Step.LISTING:
            bitmap = segment_bitmap(exchange.round)
            while exchange.their_cursor is not None:
                request = wire.encode_list_request(exchange.their_cursor, bitmap)
                exchange.their_page(*wire.decode_listing(await self._ask(peer, wire.Op.LIST, request)))
            while exchange.my_cursor is not None:
                exchange.my_page(*list_page(self._storage, summaries, peer.url, exchange.my_cursor, bitmap))
                await asyncio.sleep(0)  # a page at a time: client traffic goes in between
                await self._starvation.calm()
            failed = await self._move(peer, exchange.moves(), outcome)
            if failed:
                outcome.reason = f"{failed} records could not be moved"
                return
            exchange.moved()
        self._marks.record(peer.url, started)
        outcome.completed = True

    async def _ask(self, peer: PeerReplica, op: wire.Op, record: bytes = b"") -> bytes:
        payload = await peer.call(op, self._me, record, label="repair")
        assert isinstance(payload, bytes)
        return payload

    # --- moving records ---------------------------------------------------------------------------

    async def _move(self, peer: PeerReplica, moves: Moves, outcome: PeerOutcome) -> int:
        """Move a round's records, a window at a time at the paced rate; the number that failed."""
        failed = 0
        fetch = list(moves.fetch)
        for start in range(0, len(moves.push), _WINDOW):
            keys = moves.push[start : start + _WINDOW]
            results = await asyncio.gather(*(self._push(peer, key) for key in keys), return_exceptions=True)
            for key, result in zip(keys, results, strict=True):
                if result is True:
                    outcome.sent += 1
                elif result is False:
                    fetch.append(key)  # the peer holds a newer version after all
                elif isinstance(result, BaseException):
                    failed += self._failed(result, outcome)
            await self._pace(peer, len(keys))
        for start in range(0, len(fetch), _WINDOW):
            keys = fetch[start : start + _WINDOW]
            fetched = await asyncio.gather(*(self._fetch(peer, key) for key in keys), return_exceptions=True)
            for moved in fetched:
                if moved == "received":
                    outcome.received += 1
                elif moved == "sent":
                    outcome.sent += 1
                elif isinstance(moved, BaseException):
                    failed += self._failed(moved, outcome)
            await self._pace(peer, len(keys))
        return failed

    async def _push(self, peer: PeerReplica, key: bytes) -> bool | None:
        """Send this node's version of key: True if the peer took it, False if it holds a newer one,
        None if there was nothing to send."""
        record = self._local_version(key)
        if record is None:
            return None
        held = await peer.call(wire.Op.WRITE, key, encode(record), label="repair")
        return held is None

    async def _fetch(self, peer: PeerReplica, key: bytes) -> str:
        """Read the peer's version of key; store it if newer, else send this node's: what moved."""
        theirs = await peer.call(wire.Op.FETCH, key, label="repair")  # a rebuilding peer's versions count too
        assert theirs is None or isinstance(theirs, Record)
        mine = self._local_version(key)
        if theirs is not None and (mine is None or theirs > mine):
            await self._local.write(key, theirs)  # through the clock fence, as every stored record
            return "received"
        if mine is not None and (theirs is None or mine > theirs):
            await peer.call(wire.Op.WRITE, key, encode(mine), label="repair")
            return "sent"
        return "equal"

    def _local_version(self, key: bytes) -> Record | None:
        try:
            return self._storage.read(key)
        except CorruptRecord:
            return None  # a version from the peer heals it

    def _failed(self, error: BaseException, outcome: PeerOutcome) -> int:
        if isinstance(error, ReplicaSkewRefused):
            outcome.refused += 1
            return 0  # refused for good: no exchange would move it
        if isinstance(error, ReplicaError | StorageError):
            return 1
        raise error

    async def _pace(self, peer: PeerReplica, moved: int) -> None:
        """Sleep while the loop is busy, and as long as keeps the records moved within the rate (the
        remote one with a peer in another datacenter)."""
        await self._starvation.calm()
        ahead = (self._pace_far if peer.url in self._far else self._pace_near).ahead(moved, time.monotonic())
        if ahead > 0:
            await self._tasks.sleep(ahead)

    def _count(self, outcome: PeerOutcome) -> None:
        totals = self.totals
        totals.exchanges["completed" if outcome.completed else "failed"] += 1
        for figure in ("segments_compared", "segments_differing", "sent", "received", "refused"):
            setattr(totals, figure, getattr(totals, figure) + getattr(outcome, figure))


class _Pace:
    """Records moved against a rate per second, counted in windows of a second: how far ahead of it."""

    __slots__ = ("_moved", "_since", "rate")

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._since = time.monotonic()
        self._moved = 0

    def ahead(self, moved: int, now: float) -> float:
        """Seconds to wait, at ``now``, so that ``moved`` records more keep within the rate."""
        if now - self._since > 1.0:
            self._since, self._moved = now, 0
        self._moved += moved
        return self._moved / self.rate - (now - self._since)
