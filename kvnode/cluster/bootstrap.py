"""A node becoming a member: ``node --join SEED_URL`` (a member more) or ``node --join SEED_URL
--replace MEMBER_URL`` (in the place of a member that is down for good).

The node is not a member yet. It learns the cluster's identity from the seed's ``/v0/status`` and the
membership over a replica channel (which proves the cluster secret), then makes the change itself
(:func:`take_place`), as every change is made (kvnode.cluster.changes.make_change), each step recorded
before the next takes effect:

1. check: no other change is under way; for a replace, MEMBER is a member and does not answer (a member
   that is up is not replaced: stop it first); every other member is reachable (refused otherwise,
   naming those that are not);
2. offer the next version (kvnode.topology.membership: this node joining, or in MEMBER's place) to the
   claimant, the first other member in the cluster's order;
3. store that version here (for a replace, this node's data "rebuilding" first), then offer it to every
   other member;
4. start as a member. A replacement rebuilds from the other replicas (kvnode.healing.rebuild): it takes
   writes at once, and its reads answer "not ready" until it holds every record it owns. A node joining
   takes writes for the keys it will own while reads stay on their owners (kvnode.coordinator.coordinator's
   pending replicas), and walks the rest of its join as its own part (kvnode.cluster.own_part).

A crash anywhere is resumed by starting the node again with the same flags: before step 3 the change is
checked and offered again (a claimant that took it takes the same version again); after it, the node is a
member (joining, or rebuilding), its data dir says so, the flags are ignored, and it goes on from there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable
from functools import partial

import aiohttp

from kvnode.cluster.changes import make_change
from kvnode.config import NodeConfig
from kvnode.replica.channel.handshake import ClusterAuth
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.replica.readiness import NodeState
from kvnode.storage.system_db import SystemDb
from kvnode.topology.change_steps import Start, start_from
from kvnode.topology.membership import ChangeRefused, Membership

__all__ = ["CHANNELS_LOG", "OpenPeer", "take_place"]

log = logging.getLogger(__name__)

# What the change's own channels log: nothing. They are the change's, not the node's: their comings and
# goings are not the node's news, and a failure is the change's to say, in the one line a refused change
# ends with. A logger of this module's own, so that no other channel is silenced.
CHANNELS_LOG = logging.getLogger(f"{__name__}.channels")
CHANNELS_LOG.addFilter(lambda record: False)

_REACH_S = 3.0  # how long a member may take to open a channel before it counts as unreachable

# A channel to a member for the change only (closed when it is made): its URL, the cluster's proof, and
# the logger its comings and goings go to.
OpenPeer = Callable[[str, ClusterAuth | None, logging.Logger], PeerReplica]


async def take_place(
    config: NodeConfig, system: SystemDb, ssl_context: ssl.SSLContext | None, open_peer: OpenPeer
) -> Membership:
    """Make the change and return the membership this node is a member of; raises ChangeRefused."""
    kind = "replace" if config.replace else "join"
    cluster = await _cluster_identity(config.join, ssl_context)
    auth = ClusterAuth(config.cluster_secret, cluster, config.url) if config.cluster_secret else None
    opened: dict[str, PeerReplica] = {}

    def peer(url: str) -> PeerReplica:
        if url not in opened:
            opened[url] = open_peer(url, auth, CHANNELS_LOG)
        return opened[url]

    try:
        if not await peer(config.join).reach(_REACH_S):
            raise ChangeRefused(f"cannot {kind}: {_seed_not_reached(config.join, peer(config.join))}")
        current = Membership.decode(await peer(config.join).fetch_membership())
        if start_from(current, config.url) is Start.STORE:
            plan = current  # the claimant took this node's change before it crashed
        elif config.replace:
            plan = current.replaced(config.replace, config.url)
            if await peer(config.replace).reach(_REACH_S):
                raise ChangeRefused(
                    f"{config.replace} answers: a member that is up is not replaced; stop it first"
                )
        else:
            plan = current.with_joining(config.url, config.zone, config.datacenter)
        others = [url for url in plan.urls if url != config.url]
        reached = await asyncio.gather(*(peer(url).reach(_REACH_S) for url in others))
        unreachable = [url for url, ok in zip(others, reached, strict=True) if not ok]
        if unreachable:
            raise ChangeRefused(f"a {kind} needs every other member; unreachable: {', '.join(unreachable)}")
        store = partial(_store, system, plan, config)
        crash_at = config.crash_at
        await make_change(plan, config.url, peer, store, newcomer=True, crash_at=crash_at, step="change")
        return plan
    except (ReplicaError, ValueError) as error:
        raise ChangeRefused(f"cannot {kind}: {error}") from None
    finally:
        for opened_peer in opened.values():
            await opened_peer.close()


def _seed_not_reached(seed: str, channel: PeerReplica) -> str:
    """Why the seed, which answered its /v0/status, opened no replica channel: its refusal in full (the
    fix with it: the secret's flag), or what the attempt met."""
    why = channel.attempt_failure or f"no replica channel within {_REACH_S:g}s"
    if channel.refusal:
        return f"the seed {seed} refused this node's replica channel: {why}"
    return f"the seed {seed} answered its status but not on the replica channel: {why}"


def _store(system: SystemDb, plan: Membership, config: NodeConfig) -> None:
    if config.replace:
        system.identity.save_state(NodeState.REBUILDING.value)  # before the membership: see step 3
        log.warning(
            "took the place of %s (membership version %d); rebuilding its data from the other replicas",
            config.replace, plan.version,
        )  # fmt: skip
    else:
        log.warning(
            "joining (membership version %d): taking writes, streaming what it will own", plan.version
        )
    system.membership.save(plan)


async def _cluster_identity(seed: str, ssl_context: ssl.SSLContext | None) -> str:
    """The identity of the cluster ``seed`` is a member of, from its /v0/status."""
    try:
        timeout = aiohttp.ClientTimeout(total=_REACH_S)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{seed}/v0/status", ssl=ssl_context if ssl_context is not None else True) as answer,
        ):
            status = json.loads(await answer.read())
            cluster = status["cluster_id"]
    except (aiohttp.ClientSSLError, aiohttp.ClientConnectorCertificateError) as error:
        raise ChangeRefused(f"the seed {seed} did not say its cluster: {error}") from None
    except aiohttp.ClientConnectorError as error:
        cause = error.os_error  # asyncio words a refused connection "Connect call failed (...)"
        why = "connection refused" if isinstance(cause, ConnectionRefusedError) else cause.strerror or cause
        raise ChangeRefused(
            f"the seed {seed} is unreachable ({why}): check the --join URL, and that a node of the cluster "
            "runs there"
        ) from None
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as error:
        raise ChangeRefused(f"the seed {seed} did not say its cluster: {error!r}") from None
    if not isinstance(cluster, str):
        raise ChangeRefused(f"the seed {seed} did not say its cluster")
    return cluster
