"""The node's Paxos rounds: a conditional write or a serial read of one key, run by the pure proposer
(kvnode.paxos.proposer) among the key's owners, the node's own acceptor asked directly and the others
over the replica channel (PREPARE, PROPOSE, COMMIT: protocol version 4).

A round's owners are the key's present owners and, while a membership change moves the key, the owners
gaining it, and each phase needs a majority of both (as Cassandra counts pending endpoints). The round
has the node's timeout (``--timeout-ms``) to finish: a round that has no quorum by then, or is still
contended, is ``Unknown`` (a 504 saying the outcome is unknown; the next round on the key completes a
proposal that may have been chosen). A contended attempt backs off with jitter and starts again above
the ballot that beat it. Ballots come from the hybrid clock, moved past every ballot a refusal named, so
they are unique to the node (its tiebreak) and above every ballot seen. A commit goes to every owner as
a normal write of its version; an owner it fails on is hinted that version (kvnode.replica.hints), as a
plain write's missed replica is.

A peer whose channel speaks a protocol older than 4 cannot take part: a round whose key it owns is
refused (:class:`PaxosUnsupported`, a 503 naming it) rather than run without it, during a rolling
upgrade. ``--paxos-defect ignore-accepted`` (a testing aid) plants the classic proposer bug: promises'
accepted proposals ignored, so a checker can be seen to catch it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock
from kvnode.figures import Figure, Figures, Kind
from kvnode.metrics import FixedBuckets
from kvnode.paxos import messages
from kvnode.paxos.acceptor_calls import CALLS, AcceptorCalls, NotAcceptor
from kvnode.paxos.ballot import next_ballot, node_tiebreak
from kvnode.paxos.conditions import Condition
from kvnode.paxos.messages import Commit, Promise, Request
from kvnode.paxos.proposer import (
    Applied,
    Contended,
    Majorities,
    NotApplied,
    Outcome,
    Read,
    Round,
    Send,
    Start,
    Unknown,
    Waiting,
    Write,
    backoff_delay,
)
from kvnode.replica.channel.protocol import PAXOS
from kvnode.replica.errors import ReplicaError, keeps_hint
from kvnode.replica.hints import HintStore
from kvnode.replica.peer import PeerReplica
from kvnode.scheduling import Tasks
from kvnode.storage.keyspace import StorageError
from kvnode.topology.epoch import Epoch
from kvnode.topology.placement import Placement

__all__ = ["DEFECTS", "PAXOS_FIGURES", "PaxosRounds", "PaxosStats", "PaxosUnsupported"]

log = logging.getLogger(__name__)

DEFECTS = ("ignore-accepted",)  # --paxos-defect's testing aids
_OUTCOMES = ("applied", "not_applied", "read", "unknown")


class PaxosUnsupported(Exception):
    """An owner of the key speaks a replica protocol without conditional writes (a rolling upgrade)."""


@dataclass(slots=True)
class PaxosStats:
    """What the node's rounds came to since start."""

    rounds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_OUTCOMES, 0))  # by outcome
    contentions: int = 0  # attempts that lost to a higher ballot and backed off
    attempts: int = 0  # ballots a round started with (one a round when uncontended)
    unsupported: int = 0  # conditional requests refused: an owner speaks an older protocol
    # A round's duration by outcome, from its start to its answer (kvnode_paxos_round_duration_seconds).
    latency: dict[str, FixedBuckets] = field(default_factory=lambda: {o: FixedBuckets() for o in _OUTCOMES})


# PaxosStats' figures (kvnode.figures).
PAXOS_FIGURES = Figures("paxos", (
    Figure("rounds", Kind.COUNTER, "Conditional writes and serial reads by outcome (applied, not_applied: "
           "the condition failed, read: a serial read, unknown: a 504)", "kvnode_paxos_rounds", by="outcome"),
    Figure("contentions", Kind.COUNTER, "Paxos attempts that lost to a higher ballot and backed off",
           "kvnode_paxos_contentions"),
    Figure("attempts", Kind.COUNTER, "Paxos attempts started (one a round when uncontended)",
           "kvnode_paxos_attempts"),
    Figure("unsupported", Kind.COUNTER, "Conditional requests refused because an owner speaks an older "
           "replica protocol", "kvnode_paxos_unsupported"),
))  # fmt: skip


class PaxosRounds:
    """Runs this node's rounds: ``write`` a conditional write, ``read`` a serial read."""

    def __init__(
        self,
        own_url: str,
        epoch: Epoch[PeerReplica],
        acceptor: AcceptorCalls,
        clock: HybridClock,
        fence: ClockFence,
        hints: HintStore,
        timeout: float,
        defect: str = "",
    ) -> None:
        self._fence = fence
        self._timeout = timeout
        self._parts = _RoundParts(
            own_url,
            node_tiebreak(own_url),
            acceptor,
            clock,
            hints,
            defect == "ignore-accepted",
            Tasks("paxos"),
        )
        self.stats = PaxosStats()
        self.use(epoch)

    async def close(self) -> None:
        """Stop the calls still waiting for a connection (a stopping node answers no round)."""
        await self._parts.tasks.stop()

    def use(self, epoch: Epoch[PeerReplica]) -> None:
        """Run rounds among another membership's owners from the next round on."""
        self._placement: Placement = epoch.placement  # where keys are written: the owners-to-be included
        self._reads: Placement = epoch.read_placement or epoch.placement  # the present owners
        self._peers: Mapping[str, PeerReplica] = epoch.peers

    async def write(self, key: bytes, write: Write, condition: Condition | None) -> Outcome:
        """A conditional write: Applied, NotApplied (the condition failed on the current version) or
        Unknown. Raises ClockFenced (nothing written) while this node's clock is fenced, and
        PaxosUnsupported."""
        if not self._fence.ready:
            await self._fence.admit_write()
        return await self._run(key, write, condition)

    async def read(self, key: bytes) -> Outcome:
        """A serial read: Read (the current version, after completing any proposal left unfinished) or
        Unknown. Raises PaxosUnsupported."""
        return await self._run(key, None, None)

    async def _run(self, key: bytes, write: Write | None, condition: Condition | None) -> Outcome:
        started = time.perf_counter()
        current = self._reads.replicas_for(key, self._reads.replication)
        placement = self._placement  # while a change moves the key, the owners gaining it count too
        gaining = [url for url in placement.replicas_for(key, placement.replication) if url not in current]
        owners = [*current, *gaining]
        self._check_protocols(owners)
        round_ = Round(
            owners,
            Majorities.of(current, gaining),
            write=write,
            condition=condition,
            now_us=self._parts.clock.current(),
        )
        outcome = await _Driver(self._parts, self._peers, key, round_).run(self._timeout)
        stats = self.stats
        stats.attempts += round_.attempts
        stats.contentions += round_.contentions
        name = _outcome_name(outcome)
        stats.rounds[name] += 1
        stats.latency[name].observe(time.perf_counter() - started)
        return outcome

    def _check_protocols(self, owners: list[str]) -> None:
        older = [
            f"{url} (protocol {peer.protocol})"
            for url in owners
            if (peer := self._peers.get(url)) is not None and peer.connected and peer.protocol < PAXOS
        ]
        if older:
            self.stats.unsupported += 1
            raise PaxosUnsupported(
                f"conditional writes need replica protocol {PAXOS} on every owner of the key, and "
                f"{', '.join(older)} speaks an older one: finish the rolling upgrade, then retry"
            )


_NAMES: dict[type, str] = {Applied: "applied", NotApplied: "not_applied", Read: "read", Unknown: "unknown"}


def _outcome_name(outcome: Outcome) -> str:
    return _NAMES[type(outcome)]


@dataclass(frozen=True, slots=True)
class _RoundParts:
    """What every round of the node uses: its URL and ballot tiebreak, its own acceptor, its clock, its
    hints, and whether the planted defect is on."""

    own_url: str
    node: int
    acceptor: AcceptorCalls
    clock: HybridClock
    hints: HintStore
    ignore_accepted: bool
    tasks: Tasks  # the calls waiting for a connection to their owner


class _Driver:
    """One round carried out: its sends made, its replies fed back, its attempts started and backed off,
    until it has an outcome or its time is up."""

    def __init__(
        self, parts: _RoundParts, peers: Mapping[str, PeerReplica], key: bytes, round_: Round
    ) -> None:
        self._parts = parts
        self._peers = peers
        self._key = key
        self._round = round_
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._deadline = 0.0

    async def run(self, timeout: float) -> Outcome:
        round_, loop = self._round, self._loop
        deadline = self._deadline = loop.time() + timeout
        while True:
            status = round_.status
            left = deadline - loop.time()
            if isinstance(status, Applied | NotApplied | Read | Unknown):
                return status
            if left <= 0:
                return round_.time_out()
            if isinstance(status, Waiting):
                self._changed.clear()
                try:
                    async with asyncio.timeout(left):
                        await self._changed.wait()
                except TimeoutError:
                    return round_.time_out()
                continue
            if isinstance(status, Contended):
                await asyncio.sleep(backoff_delay(round_.contentions, random.random(), left))
                if loop.time() >= deadline:
                    return round_.time_out()
            self._start(status)

    def _start(self, status: Start | Contended) -> None:
        clock = self._parts.clock
        clock.observe(status.above.micros)
        ballot = next_ballot(clock.now(), self._parts.node, status.above)
        self._send(self._round.start(ballot))

    def _send(self, sends: list[Send]) -> None:
        own = self._parts.own_url
        local = [send for send in sends if send.to == own]
        for send in sends:
            if send.to != own:
                self._to_peer(send)
        for send in local:  # after the peers': their calls leave with this loop iteration's frame
            self._to_self(send.message)

    def _to_self(self, request: Request) -> None:
        try:
            reply = self._parts.acceptor.answer(self._key, request)
        except (NotAcceptor, StorageError) as failure:
            log.debug("this node's acceptor did not answer a %s: %s", type(request).__name__, failure)
            return
        self._received(self._parts.own_url, reply)

    def _to_peer(self, send: Send) -> None:
        peer = self._peers.get(send.to)
        if peer is None:
            return  # no longer a member: silent
        if peer.connected:
            self._call(peer, send.message, hinted=0)
            return
        # A commit to an owner not connected is hinted now, before the round answers (so the hint survives
        # a kill -9 of this node), and the hint removed if the commit reaches it after all, as a plain
        # write's is. The call waits for a connection first: one of an older protocol would be dropped.
        hinted = self._hint(peer, send.message) if isinstance(send.message, Commit) else 0
        self._parts.tasks.spawn(self._reach_then_call(peer, send.message, hinted))

    async def _reach_then_call(self, peer: PeerReplica, request: Request, hinted: int) -> None:
        if await peer.reach(max(0.0, self._deadline - self._loop.time())) and peer.protocol >= PAXOS:
            self._call(peer, request, hinted)

    def _call(self, peer: PeerReplica, request: Request, hinted: int) -> None:
        call = peer.call(CALLS[type(request)], self._key, messages.encode(request), label="paxos")
        call.add_done_callback(partial(self._peer_answered, peer, request, hinted))

    def _hint(self, peer: PeerReplica, commit: Commit) -> int:
        """A commit an owner missed: its version hinted, as a plain write's missed replica is; the hint's
        sequence number (0: not kept)."""
        return self._parts.hints.add(peer.url, self._key, commit.proposal.record, down_for=peer.down_for())

    def _peer_answered(
        self, peer: PeerReplica, request: Request, hinted: int, call: asyncio.Future[object]
    ) -> None:
        if call.cancelled():
            return
        error = call.exception()
        if error is not None:
            if (
                isinstance(request, Commit)
                and not hinted
                and isinstance(error, ReplicaError)
                and keeps_hint(error)
            ):
                self._hint(peer, request)
            return
        if hinted:  # the commit reached it after all
            self._parts.hints.remove(peer.url, (hinted,))
        payload = call.result()
        assert isinstance(payload, bytes)
        try:
            reply = messages.decode(payload)
        except ValueError as malformed:
            log.warning("%s answered a %s malformed: %s", peer.url, type(request).__name__, malformed)
            return
        self._received(peer.url, reply)

    def _received(self, owner: str, reply: messages.Message) -> None:
        if not isinstance(
            reply, messages.Promise | messages.Accepted | messages.Committed | messages.Refused
        ):
            return
        if self._parts.ignore_accepted and isinstance(reply, Promise):
            reply = reply._replace(accepted=None)  # the planted defect (--paxos-defect ignore-accepted)
        self._send(self._round.receive(owner, reply))
        self._changed.set()
