"""A node's parts built in dependency order and closed in the reverse order: :func:`open_parts` opens
storage, the system database, the membership (a join or a replace made first, when asked), the clock and
its fence, the peers' channels and every background driver, and yields them as one NodeParts.

    >>> async with open_parts(config) as parts:                     # doctest: +SKIP
    ...     app = kvnode.node.app.create_app(parts)
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Protocol

from kvnode.access.admission import Admission, default_max_inflight_bytes
from kvnode.access.client_auth import ClientTokens
from kvnode.access.connections import capacity
from kvnode.access.tls import client_context
from kvnode.access.uploads import Uploads
from kvnode.clocks.fence import ClockFence
from kvnode.clocks.hybrid import HybridClock, wall_clock_us
from kvnode.clocks.offsets import ClockOffsets
from kvnode.cluster.bootstrap import take_place
from kvnode.cluster.join_watcher import JoinWatcher
from kvnode.cluster.members import Members
from kvnode.cluster.membership_calls import MembershipCalls
from kvnode.cluster.own_part import OwnPart
from kvnode.config import NodeConfig
from kvnode.coordinator.coordinator import Coordinator
from kvnode.coordinator.fanout import FANOUTS
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.healing.gc import GarbageCollector, pass_interval_s
from kvnode.healing.gc_rule import GcRule
from kvnode.healing.missed_writes import MissedWrites
from kvnode.healing.rebuild import Rebuild
from kvnode.healing.repair_calls import RepairCalls
from kvnode.healing.upkeep import SummaryUpkeep
from kvnode.loop_lag import LoopLagMonitor
from kvnode.memory import Settler
from kvnode.node.exporter import NodeMetrics
from kvnode.node.parts import NodeParts
from kvnode.paxos.acceptor_calls import AcceptorCalls
from kvnode.paxos.rounds import PaxosRounds
from kvnode.replica.channel import wire
from kvnode.replica.channel.answerers import Answerers
from kvnode.replica.channel.handshake import ClusterAuth, Introduction
from kvnode.replica.channel.identities import Identities
from kvnode.replica.channel.protocol import spoken
from kvnode.replica.channel.server import PeerGate, ReplicaServer
from kvnode.replica.clock_probe import ClockAnswers
from kvnode.replica.failure_detector import DetectorSettings
from kvnode.replica.heartbeat import beat_interval
from kvnode.replica.hints import HintDelivery, HintStore
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.replica.storage_calls import StorageCalls
from kvnode.storage.keyspace import Storage, StorageUnavailable
from kvnode.storage.system_db import SystemDb
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership, at_start, own_place_warnings

__all__ = ["open_parts"]

log = logging.getLogger(__name__)

# A peer's clock measurements count this long: a few seconds of beats, so that a clock that was fixed
# (or a peer that went away) stops deciding the fence soon.
_OFFSET_MAX_AGE_S = 10.0


@contextlib.asynccontextmanager
async def open_parts(config: NodeConfig) -> AsyncIterator[NodeParts]:
    """The node's parts, open and running (hint delivery, the loop-lag monitor) until the block ends.

    Raises kvnode.storage.keyspace.StorageUnavailable when the data dir cannot be had,
    kvnode.access.tls.TlsUnusable and kvnode.access.client_auth.BadTokensFile when the TLS or token files
    cannot be used. Call it inside the running event loop (the replicas keep a reference to it).
    """
    peer_ssl = client_context(config)
    tokens = None if config.auth_tokens_file is None else ClientTokens(config.auth_tokens_file)
    async with contextlib.AsyncExitStack() as opened:
        system = SystemDb.open(config.data_dir)  # first: it refuses a data dir of a newer format
        opened.callback(system.close)
        limits = wire.Limits.for_body(config.max_body_bytes)
        membership = await _membership_at_start(system, config, peer_ssl, limits)
        size = len(membership.urls)
        placement = membership.placement(membership.home_of(config.url))  # as its epochs place keys
        summaries = SummaryUpkeep(system.summaries, config.url, placement)
        storage = Storage.open(config.data_dir, fsync=config.fsync, on_change=summaries.changed)
        opened.callback(storage.close)
        summaries.start(storage)
        opened.push_async_callback(summaries.stop)  # after every writer stopped: saves the trees
        floor = system.clock_floor
        wall = wall_clock_us(config.clock_offset_ms)
        max_skew_us = config.max_clock_skew_ms * 1000
        clock = HybridClock(wall, max_skew_us, floor.load(), floor.persist)
        if clock.dropped_floor:
            log.warning(
                "dropped the clock floor %d persisted %.0f ms ahead of the wall clock (the clock was wrong "
                "then, or is now)", clock.dropped_floor, (clock.dropped_floor - wall()) / 1000,
            )  # fmt: skip
        fence = ClockFence(wall, max_skew_us, ClockOffsets(_OFFSET_MAX_AGE_S), peers=size - 1)
        hints = HintStore(
            system.hints,
            fsync=config.fsync,
            max_per_peer=config.max_hints_per_peer,
            window_s=config.hint_window_s,
            grace_s=config.gc_grace_s,
        )
        rebuild = Rebuild(system.identity, size)

        # A handshake's news goes to the rebuild and to the membership; ``members`` is made below (its
        # peers' channels carry these identities), and no handshake happens before the node runs.
        def peer_met(peer_url: str, theirs: Introduction) -> None:
            rebuild.peer_met(peer_url, theirs)
            members.heard_version(peer_url, theirs.membership)

        # A ping on a peer's channel to this node is a sign of its life to this node's channel to it (one ping
        # a pair a beat, not two: kvnode.replica.peer); the peers change with the membership, so each ping
        # looks its peer up, and one that is not a member is ignored.
        def peer_pinged(peer_url: str) -> None:
            peer = members.epoch.peers.get(peer_url)
            if peer is not None:
                peer.pinged()

        identities = Identities(
            config.url,
            membership,
            system.identity,
            system.peer_identities,
            peer_met,
            spoken(config.max_protocol),
        )
        gate = PeerGate(
            _cluster_auth(config, membership),
            limits,
            identities=identities,
            tls=config.tls,
            pinged=peer_pinged,
        )

        detector = DetectorSettings(config.phi_threshold, config.acceptable_pause_ms / 1000)

        def make_peer(url: str) -> PeerReplica:
            return PeerReplica(
                url,
                config.timeout,
                speculative_ceiling=config.speculative_ceiling_ms / 1000,
                auth=gate.auth,
                limits=gate.limits,
                clock_sampler=(fence.measured, wall),
                ssl_context=peer_ssl,
                identities=identities,
                detector=detector,
                own_url=config.url,
            )

        settler = Settler()
        # Its starvation: client requests shed, hints, repair and GC yield. Quiet, it ticks with the beats.
        loop_lag = LoopLagMonitor(quiet_interval=beat_interval(config.timeout))

        def follow(peer: PeerReplica) -> Callable[[], Awaitable[None]]:
            delivery = HintDelivery(hints, peer, config.hint_rate, settler, loop_lag.starvation)
            delivery.start()
            return delivery.stop

        members = Members(
            config.url,
            membership,
            system.membership,
            hints,
            make_peer,
            clock.current,
            config.crash_at,
            follow,
        )
        epoch = members.epoch
        local = LocalReplica(config.url, storage, fence, rebuild.node_state)
        coordinator = Coordinator(epoch, FANOUTS[config.fanout], clock, hints, local, fence)
        acceptor = AcceptorCalls(system.paxos, storage, clock, fence, rebuild.node_state, config.fsync)
        paxos = PaxosRounds(
            config.url, epoch, acceptor, clock, fence, hints, config.timeout, defect=config.paxos_defect
        )
        opened.push_async_callback(paxos.close)
        acceptor.start(pass_interval_s(config.gc_grace_s), config.gc_grace_s)
        opened.push_async_callback(acceptor.stop)
        anti_entropy = AntiEntropy(
            config.url,
            summaries,
            storage,
            local,
            members.peers,
            clock,
            system.repair_marks,
            interval_s=config.repair_interval_s,
            rate=config.repair_rate,
            remote_rate=config.remote_repair_rate,
            starvation=loop_lag.starvation,
        )
        own_part = OwnPart(members, anti_entropy, storage, local, 2 * config.timeout, config.crash_at)
        parts = NodeParts(
            config=config,
            members=members,
            own_part=own_part,
            storage=storage,
            system=system,
            clock=clock,
            fence=fence,
            hints=hints,
            coordinator=coordinator,
            local=local,
            admission=Admission(
                config.max_inflight,
                config.max_inflight_bytes or default_max_inflight_bytes(config.max_body_bytes),
                config.max_body_bytes,
                settler,
                loop_lag.starvation,
            ),
            connections=capacity(size, config.max_connections, config.header_timeout_s),
            metrics=NodeMetrics(),
            loop_lag=loop_lag,
            uploads=Uploads(config.body_timeout_s),
            replica_server=_replica_server(
                gate,
                ClockAnswers(fence, rebuild.node_state),
                StorageCalls(storage, clock, fence, rebuild.node_state),
                RepairCalls(storage, summaries),
                MembershipCalls(members),
                acceptor,
                coordinator,
            ),
            summaries=summaries,
            gc=GarbageCollector(
                storage,
                _gc_rule(config, epoch),
                system.repair_marks,
                clock.current,
                pass_interval_s(config.gc_grace_s),
                epoch.peers,
                starvation=loop_lag.starvation,
            ),
            anti_entropy=anti_entropy,
            tokens=tokens,
            rebuild=rebuild,
            identities=identities,
            paxos=paxos,
            acceptor=acceptor,
            settler=settler,
        )
        parts.metrics.watch(parts.snapshot, local)
        parts.metrics.histograms(
            "kvnode_paxos_round_duration_seconds",
            "Conditional writes and serial reads from start to outcome, by outcome",
            "outcome",
            paxos.stats.latency,
        )
        join_watcher = JoinWatcher(members, config.join_timeout_s)
        settler.start()
        opened.push_async_callback(settler.stop)
        # Every part that depends on the membership, told of this epoch and of each one after it (a join or
        # a leave under way at start included: this node goes on with its part).
        members.start(
            [
                coordinator,
                hints,
                paxos,
                summaries,
                parts.gc,
                anti_entropy,
                fence,
                identities,
                parts.metrics,
                rebuild,
                own_part,
                join_watcher,
            ]
        )
        opened.push_async_callback(members.close)
        parts.gc.start()
        opened.push_async_callback(parts.gc.stop)
        parts.loop_lag.start()
        opened.push_async_callback(parts.loop_lag.stop)
        anti_entropy.start()
        opened.push_async_callback(anti_entropy.stop)
        missed_writes = MissedWrites(storage, anti_entropy)
        missed_writes.start()
        opened.push_async_callback(missed_writes.stop)
        rebuild.start(anti_entropy)
        opened.push_async_callback(rebuild.stop)
        opened.push_async_callback(own_part.stop)
        opened.push_async_callback(join_watcher.stop)
        yield parts


def _gc_rule(config: NodeConfig, epoch: Epoch[PeerReplica]) -> GcRule:
    # A version reaches a replica within the replica timeout (a write) or the hint window (a hint),
    # stamped by a clock up to the maximum skew off this one's (kvnode.healing.gc_rule).
    arrival_us = (config.timeout_ms + config.max_clock_skew_ms) * 1000 + config.hint_window_s * 1_000_000
    grace_us = config.gc_grace_s * 1_000_000
    return GcRule(
        config.url,
        epoch.placement,
        grace_us=grace_us,
        arrival_us=arrival_us,
        settled_since=epoch.settled_since,
    )


def _change_peer(
    config: NodeConfig,
    limits: wire.Limits,
    ssl_context: ssl.SSLContext | None,
    url: str,
    auth: ClusterAuth | None,
    logger: logging.Logger,
) -> PeerReplica:
    """A channel to a member for a change this node makes before it runs (kvnode.cluster.bootstrap)."""
    return PeerReplica(url, config.timeout, auth=auth, limits=limits, ssl_context=ssl_context, logger=logger)


def _replica_server(gate: PeerGate, clock: ClockAnswers, *owners: Registers) -> ReplicaServer:
    """The replica channel's server end, each call answered by the part that owns what it asks: the
    clock's (whose answer a clock ping's pong carries too) and the ``owners``'."""
    answerers = Answerers()
    for owner in (clock, *owners):
        owner.register(answerers)
    return ReplicaServer(gate, answerers, clock.now)


class Registers(Protocol):
    """A part that answers some of the replica protocol's calls."""

    def register(self, answerers: Answerers) -> None: ...


def _cluster_auth(config: NodeConfig, membership: Membership) -> ClusterAuth | None:
    if not config.cluster_secret:
        return None  # kvnode.node.serving says so, once listening
    return ClusterAuth(config.cluster_secret, membership.cluster, config.url)


async def _membership_at_start(
    system: SystemDb, config: NodeConfig, peer_ssl: ssl.SSLContext | None, limits: wire.Limits
) -> Membership:
    """The stored membership; at the first start, the one --cluster seeds, stored before it is used, or
    with --replace the one this node takes a member's place in (raises ChangeRefused)."""
    try:
        stored = system.membership.load()
    except ValueError as error:
        unreadable = f"the stored membership in {config.data_dir} is unreadable: {error}"
        raise StorageUnavailable(unreadable) from None
    if config.join:
        if stored is None:
            return await take_place(config, system, peer_ssl, partial(_change_peer, config, limits, peer_ssl))
        log.info("a member already (membership version %d): --join and --replace are ignored", stored.version)
        membership = stored
        warnings = own_place_warnings(stored, config.url, config.zone, config.datacenter)
    else:
        membership, warnings = at_start(
            stored, config.cluster, config.replication_factor, config.url, config.zones, config.datacenters
        )
    if config.url not in membership.urls:  # before the warnings: how the flags differ is beside the point
        raise StorageUnavailable(_not_a_member(config, membership, system.membership.left()))
    if stored is None:
        system.membership.save(membership)
    for warning in warnings:
        log.warning("%s", warning)
    return membership


def _not_a_member(config: NodeConfig, membership: Membership, left: str) -> str:
    """Why a node whose data dir stores a membership without it cannot start, and what to do."""
    if left:
        return (
            f"{left} left the cluster (or its join was undone) in membership version {membership.version}: "
            f"the data dir {config.data_dir} is no longer a member's; to serve again, join with --join "
            f"SEED_URL and a new --data-dir (or this one wiped)"
        )
    return (
        f"{config.url} is not a member of the cluster stored in {config.data_dir} "
        f"({','.join(membership.urls)}): start it with its member URL, or with another data dir"
    )
