"""Taking the place of a member that is down for good: ``node --join SEED_URL --replace MEMBER_URL``.

The node is not a member yet. It learns the cluster's identity from the seed's ``/v0/status`` and the
membership over a replica channel (which proves the cluster secret), then makes the change itself, each
step recorded before the next takes effect:

1. check: MEMBER is a member and does not answer (a member that is up is not replaced: stop it first),
   and every other member is reachable (refused otherwise, naming those that are not);
2. offer the next version, with this node in MEMBER's place (kvnode.membership.Membership.replaced), to
   the claimant, the first other member in the cluster's order. A member takes a version only if it is
   newer than its own, so of two changes made at once the claimant takes one and refuses the other (it
   orders changes, as Riak's claimant does);
3. store that version here, with this node's data "rebuilding" (saved first), then offer it to every
   other member (one that misses it learns it at its next handshake with a member that has it);
4. start as a member that rebuilds from the other replicas (kvnode.repair.rebuild): it takes writes at
   once, and its reads answer "not ready" until it holds every record it owns.

A crash anywhere is resumed by starting the node again with the same flags: before step 3 the change is
checked and offered again (a claimant that took it takes the same version again); after it, the node is a
member, its data dir says so, and the flags are ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl

import aiohttp

from kvnode.config import NodeConfig
from kvnode.crash_points import crash_point
from kvnode.membership import ChangeRefused, Membership
from kvnode.repair.rebuild_state import NodeState
from kvnode.replica import wire
from kvnode.replica.auth import ClusterAuth
from kvnode.replica.errors import ReplicaError
from kvnode.replica.peer import PeerReplica
from kvnode.system_db import SystemDb

__all__ = ["take_place"]

log = logging.getLogger(__name__)

_REACH_S = 3.0  # how long a member may take to open a channel before it counts as unreachable


async def take_place(
    config: NodeConfig, system: SystemDb, ssl_context: ssl.SSLContext | None, limits: wire.Limits
) -> Membership:
    """Make the change and return the membership this node is a member of; raises ChangeRefused."""
    cluster = await _cluster_identity(config.join, ssl_context)
    auth = ClusterAuth(config.cluster_secret, cluster, config.url) if config.cluster_secret else None
    opened: dict[str, PeerReplica] = {}

    def peer(url: str) -> PeerReplica:
        if url not in opened:
            opened[url] = PeerReplica(url, config.timeout, auth=auth, limits=limits, ssl_context=ssl_context)
        return opened[url]

    # These channels are the change's, not the node's: their comings and goings are not logged (a
    # failure is the change's to say), so a refused change ends with its one line.
    quiet = logging.getLogger("kvnode.replica.peer")
    quiet.addFilter(_nothing)
    try:
        if not await peer(config.join).reach(_REACH_S):
            raise ChangeRefused(f"the seed {config.join} is unreachable: {peer(config.join).refusal}")
        current = Membership.decode(await peer(config.join).fetch_membership())
        if config.url in current.urls:
            plan = current  # this node took the place already (a crash after step 2)
        else:
            plan = current.replaced(config.replace, config.url)
            if await peer(config.replace).reach(_REACH_S):
                raise ChangeRefused(
                    f"{config.replace} answers: a member that is up is not replaced; stop it first (or "
                    "remove it with admin leave)"
                )
        others = [url for url in plan.urls if url != config.url]
        reached = await asyncio.gather(*(peer(url).reach(_REACH_S) for url in others))
        unreachable = [url for url, ok in zip(others, reached, strict=True) if not ok]
        if unreachable:
            raise ChangeRefused(f"a replace needs every other member; unreachable: {', '.join(unreachable)}")
        claimant, *rest = others
        try:
            await peer(claimant).offer_membership(plan.encode())
        except ReplicaError as refusal:
            raise ChangeRefused(f"the claimant {claimant} did not take the change: {refusal}") from None
        crash_point("replace:claimant-took", config.crash_at)
        system.identity.save_state(NodeState.REBUILDING.value)  # before the membership: see step 3
        system.membership.save(plan)
        crash_point("replace:stored", config.crash_at)
        log.warning(
            "took the place of %s (membership version %d); rebuilding its data from the other replicas",
            config.replace, plan.version,
        )  # fmt: skip
        offers = await asyncio.gather(
            *(peer(url).offer_membership(plan.encode()) for url in rest), return_exceptions=True
        )
        for url, outcome in zip(rest, offers, strict=True):
            if isinstance(outcome, BaseException):
                log.warning("%s did not take membership version %d yet: %s", url, plan.version, outcome)
        return plan
    except (ReplicaError, ValueError) as error:
        raise ChangeRefused(f"cannot replace {config.replace}: {error}") from None
    finally:
        for opened_peer in opened.values():
            await opened_peer.close()
        quiet.removeFilter(_nothing)


def _nothing(record: logging.LogRecord) -> bool:
    return False


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
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as error:
        raise ChangeRefused(f"the seed {seed} did not say its cluster: {error!r}") from None
    if not isinstance(cluster, str):
        raise ChangeRefused(f"the seed {seed} did not say its cluster")
    return cluster
