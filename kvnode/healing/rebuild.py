"""Rebuilding a node whose disk was lost: acting on :mod:`kvnode.healing.rebuild_state`'s verdicts.

:class:`Rebuild` saves every state before acting on it (so a crash resumes where the node was), asks
every peer while the state is unknown (a handshake is enough: kvnode.replica.channel.identities tells what the
peer remembered), and while rebuilding repairs with every peer (anti-entropy's exchange,
kvnode.healing.anti_entropy) until each one has completed once, retrying the ones that failed (a peer down is
waited for, and said so in the log), then serves.
Its figures (records received, peers done) go to ``/v0/stats``, ``/v0/cluster``, ``admin status`` and
``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from kvnode.figures import Figure, Figures, Kind
from kvnode.healing.anti_entropy import AntiEntropy
from kvnode.healing.rebuild_state import RebuildState
from kvnode.replica.channel.handshake import Introduction
from kvnode.replica.peer import PeerReplica
from kvnode.replica.readiness import NodeState
from kvnode.scheduling import Sleep, Tasks
from kvnode.storage.system_db import NodeIdentity
from kvnode.topology.epoch import Epoch

__all__ = ["REBUILD_FIGURES", "Rebuild", "RebuildProgress"]

log = logging.getLogger(__name__)

# While unknown, how often the peers not connected are asked again: a new cluster's nodes start one after
# another, and each is unknown until one of its peers is up.
_ASK_EVERY_S = 0.2


@dataclass(slots=True)
class RebuildProgress:
    """How far the rebuild is, updated as each repair with a peer ends."""

    peers: int  # to complete a repair with
    done: set[str] = field(default_factory=set)  # peers a repair completed with
    records_received: int = 0
    attempts: int = 0  # rounds of repairs with the peers not done yet
    waiting_for: dict[str, str] = field(default_factory=dict)  # peer -> why its last repair failed
    started: float | None = None  # time.monotonic() when this process began rebuilding
    ended: float | None = None

    @property
    def peers_done(self) -> int:
        return len(self.done)

    def seconds(self) -> float:
        """How long the rebuild took, or has taken so far; 0 when this process did not rebuild."""
        if self.started is None:
            return 0.0
        return (self.ended or time.monotonic()) - self.started


# A Rebuild's figures (kvnode.figures): this node's identity, the state of its data, its rebuild's progress
# (all zero when it never rebuilt since start).
REBUILD_FIGURES = Figures("rebuild", (
    Figure("identity", Kind.TEXT, "this node's identity"),
    Figure("node_state", Kind.GAUGE, "1 for the state of this node's data: serving, rebuilding (its disk was "
           "lost), unknown (new data dir, no peer asked yet)", "kvnode_node_state", key="state",
           states=tuple(state.value for state in NodeState)),
    Figure("progress.peers", Kind.GAUGE, "Peers this node's rebuild is to complete a repair with",
           "kvnode_rebuild_peers"),
    Figure("progress.peers_done", Kind.GAUGE, "Peers this node's rebuild has completed a repair with",
           "kvnode_rebuild_peers_done"),
    Figure("records_received", Kind.COUNTER, "Records received by this node's rebuild since start",
           "kvnode_rebuild_records"),
    Figure("progress.seconds", Kind.GAUGE, "How long this node's rebuild took, or has taken so far",
           "kvnode_rebuild_seconds"),
    Figure("progress.attempts", Kind.COUNTER, "Rounds of repairs with the peers this node's rebuild had not "
           "done yet", "kvnode_rebuild_attempts"),
    Figure("progress.waiting_for", Kind.TEXT, "peer -> why its last repair failed"),
))  # fmt: skip


class Rebuild:
    """The state of this node's data, saved in ``identity``, and the task that rebuilds it. Create it
    inside the running event loop; :meth:`start` once the peers exist."""

    def __init__(
        self, identity: NodeIdentity, members: int, retry_s: float = 1.0, sleep: Sleep = asyncio.sleep
    ) -> None:
        """``members``: the cluster's, this node included."""
        self._identity = identity
        self._machine = RebuildState.at_start(identity.saved_state(), members)
        self._save(self._machine.state)
        self._retry_s = retry_s
        self._changed = asyncio.Event()
        self._tasks = Tasks("rebuild", sleep)
        self._peers: tuple[PeerReplica, ...] = ()  # the members to rebuild from, as the epoch says
        self.progress = RebuildProgress(peers=members - 1)
        self._anti_entropy: AntiEntropy | None = None  # what it repairs with, once started

    def node_state(self) -> NodeState:
        return self._machine.state

    @property
    def identity(self) -> str:
        return self._identity.value

    @property
    def records_received(self) -> int:
        """Received so far, the exchange under way included while this node rebuilds (an exchange's
        records are counted when it ends; progress should move before)."""
        current = None if self._anti_entropy is None else self._anti_entropy.current
        rebuilding = self._machine.state is NodeState.REBUILDING
        return self.progress.records_received + (current.received if rebuilding and current else 0)

    def peer_met(self, peer_url: str, theirs: Introduction) -> None:
        """A handshake with ``peer_url`` completed, and the peer introduced itself as ``theirs``."""
        changed = self._machine.peer_met(theirs.remembered, theirs.replaced, self._identity.value)
        if changed is None:
            return
        self._save(changed)
        if changed is NodeState.REBUILDING:
            log.warning(
                "this node's data was lost: %s knew this URL as another node (%s), this node is %s; "
                "rebuilding from every peer (reads answer not ready until then, writes are taken)",
                peer_url, self._machine.known_as, self._identity.value,
            )  # fmt: skip
        else:
            log.info("%s did not know this node before: a new member, serving", peer_url)
        self._changed.set()

    def use(self, epoch: Epoch[PeerReplica]) -> None:
        """Rebuild from another membership's members from the next pass on (one that left is no longer
        waited for)."""
        self._peers = tuple(epoch.peers.values())

    def start(self, anti_entropy: AntiEntropy) -> None:
        """Act on the state from now on, repairing with ``anti_entropy``'s peers."""
        self._anti_entropy = anti_entropy
        if not self._machine.serving:
            self._tasks.spawn(self._run(anti_entropy))

    async def stop(self) -> None:
        await self._tasks.stop()

    def _save(self, state: NodeState) -> None:
        self._identity.save_state("" if state is NodeState.SERVING else state.value)

    async def _run(self, anti_entropy: AntiEntropy) -> None:
        while self._machine.state is NodeState.UNKNOWN:
            for peer in self._peers:  # a completed handshake is all it takes
                peer.probe()
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), _ASK_EVERY_S)
        progress = self.progress
        if self._machine.state is NodeState.REBUILDING:
            progress.started = time.monotonic()
        while self._machine.state is NodeState.REBUILDING:
            progress.attempts += 1
            waited_for = set(progress.waiting_for)
            for peer in self._peers:
                if peer.url in progress.done or peer.url not in {p.url for p in self._peers}:
                    continue  # done, or it left the membership while this pass repaired with others
                outcome = await anti_entropy.repair_with(peer)
                progress.records_received += outcome.received
                if outcome.completed:
                    progress.done.add(peer.url)
                    progress.waiting_for.pop(peer.url, None)
                else:
                    progress.waiting_for[peer.url] = outcome.reason
            # The members may have changed while it repaired (a join or a leave): it waits only for
            # those that are members now.
            members = {peer.url for peer in self._peers}
            for gone in [url for url in progress.waiting_for if url not in members]:
                del progress.waiting_for[gone]
            progress.peers = len(members)
            if not progress.waiting_for:
                self._machine.rebuilt()
                self._save(self._machine.state)
                progress.ended = time.monotonic()
                log.info(
                    "rebuilt: %d records received from %d peers in %.1fs; serving reads",
                    progress.records_received, len(progress.done), progress.seconds(),
                )  # fmt: skip
                return
            if set(progress.waiting_for) != waited_for:  # one line each time the peers waited for change
                log.warning(
                    "rebuilding: %d of %d peers done, %d records received; waiting for %s (retrying every "
                    "%gs)",
                    len(progress.done), progress.peers, progress.records_received,
                    "; ".join(f"{peer}: {why}" for peer, why in progress.waiting_for.items()), self._retry_s,
                )  # fmt: skip
            await self._tasks.sleep(self._retry_s)
