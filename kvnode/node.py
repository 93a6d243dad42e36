"""A node's lifecycle: the aiohttp application, its resources, and serving until SIGTERM/SIGINT.

Resources (LevelDB, the clock, the peer channels, hint delivery, the loop-lag monitor) open and close
in one ``cleanup_ctx``.
Shutdown stops listening, waits for request bodies still arriving, closes peers' replica channels, lets
the client requests in flight finish, then closes storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import uvloop
from aiohttp import web

from kvnode.admission import Admission
from kvnode.clock import HybridClock, wall_clock_us
from kvnode.config import NodeConfig
from kvnode.coordinator import Coordinator
from kvnode.fanout import FANOUTS
from kvnode.http_api import (
    ADMISSION,
    CLOCK,
    CONFIG,
    COORDINATOR,
    HINTS,
    LOOP_LAG,
    METRICS,
    PEER_GATE,
    PEER_SOCKETS,
    PEERS,
    STORAGE,
    UPLOADS,
    Uploads,
    add_routes,
)
from kvnode.metrics import LoopLagMonitor
from kvnode.observe import NodeMetrics, NodeState
from kvnode.placement import Placement
from kvnode.replica import Replica, wire
from kvnode.replica.auth import ClusterAuth
from kvnode.replica.hints import HintDelivery, HintStore
from kvnode.replica.local import LocalReplica
from kvnode.replica.peer import PeerReplica
from kvnode.replica.server import PeerGate
from kvnode.storage import Storage, StorageUnavailable
from kvnode.system_db import SystemDb

__all__ = ["create_app", "run_node", "serve", "serve_until_signal"]

log = logging.getLogger("kvnode")

_SHUTDOWN_TIMEOUT = 10.0  # seconds a graceful stop waits for client requests in flight


def create_app(config: NodeConfig) -> web.Application:
    app = web.Application(client_max_size=config.max_body_bytes)
    app[CONFIG] = config
    app[UPLOADS] = Uploads(config.body_timeout_s)
    app[ADMISSION] = Admission(config.max_inflight)
    app[PEER_GATE] = PeerGate(_cluster_auth(config), wire.Limits.for_body(config.max_body_bytes))
    app[PEER_SOCKETS] = set()
    app[METRICS] = NodeMetrics()
    add_routes(app)
    app.cleanup_ctx.append(_node_resources)
    app.on_shutdown.append(_close_peer_sockets)
    return app


def _cluster_auth(config: NodeConfig) -> ClusterAuth | None:
    if not config.cluster_secret:
        return None  # serve() says so, once listening
    return ClusterAuth(config.cluster_secret, config.members, config.url)


async def _node_resources(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    storage = Storage.open(config.data_dir, fsync=config.fsync)
    try:
        system = SystemDb.open(config.data_dir)
    except StorageUnavailable:
        storage.close()
        raise
    floor = system.clock_floor
    clock = HybridClock(
        wall_clock_us(config.clock_offset_ms), config.max_clock_skew_ms * 1000, floor.load(), floor.persist
    )
    hints = HintStore(
        system.hints,
        fsync=config.fsync,
        max_per_peer=config.max_hints_per_peer,
        window_s=config.hint_window_s,
    )
    gate = app[PEER_GATE]
    peers = [
        PeerReplica(
            url,
            config.timeout,
            speculative_ceiling=config.speculative_ceiling_ms / 1000,
            auth=gate.auth,
            limits=gate.limits,
        )
        for url in config.members
        if url != config.url
    ]
    local = LocalReplica(config.url, storage)
    replicas: dict[str, Replica] = {config.url: local}
    replicas.update({peer.url: peer for peer in peers})
    deliveries = [HintDelivery(hints, peer, config.hint_rate) for peer in peers]
    lag = LoopLagMonitor()
    app[STORAGE], app[CLOCK], app[HINTS], app[PEERS], app[LOOP_LAG] = storage, clock, hints, peers, lag
    app[COORDINATOR] = Coordinator(
        Placement(config.members), replicas, FANOUTS[config.fanout], clock, hints, local
    )
    app[METRICS].watch(NodeState(app[COORDINATOR], hints, local, peers, clock, lag, app[ADMISSION]))
    lag.start()
    for delivery in deliveries:
        delivery.start()
    try:
        yield
    finally:
        await lag.stop()
        for delivery in deliveries:
            await delivery.stop()
        for peer in peers:
            await peer.close()
        system.close()
        storage.close()


async def _close_peer_sockets(app: web.Application) -> None:
    """Replica channels are long-lived requests: close them, or shutdown would wait for them."""
    sockets: set[web.WebSocketResponse] = app[PEER_SOCKETS]
    for ws in list(sockets):
        await ws.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"node shutting down")


async def serve(config: NodeConfig) -> int:
    """Serve until SIGTERM or SIGINT; the process exit status."""
    runner = web.AppRunner(
        create_app(config),
        handle_signals=False,
        access_log=logging.getLogger("kvnode.access") if config.access_log else None,
        shutdown_timeout=_SHUTDOWN_TIMEOUT,
    )
    try:
        await runner.setup()
    except StorageUnavailable as error:
        print(f"kvnode: {error}", file=sys.stderr)
        return 2

    async def finish_uploads() -> None:
        # aiohttp's cleanup stops reading every connection at once, which would cut off a request whose
        # body is still arriving; so wait for those bodies first. Cleanup waits for the handlers.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_SHUTDOWN_TIMEOUT):
                await runner.app[UPLOADS].none_left()

    description = f"cluster of {len(config.members)}, {config.fanout} fan-out, data in {config.data_dir}"
    warning = (
        ""
        if config.cluster_secret
        else "no cluster secret (--cluster-secret-file or KVNODE_CLUSTER_SECRET): the replica channel "
        f"serves anyone who can reach {config.url}"
    )
    return await serve_until_signal(runner, config.host, config.port, description, finish_uploads, warning)


def _tune_gc() -> None:
    """Keep what startup made (modules, the app: some 40,000 objects that live as long as the
    process) out of the garbage collector's scans. Every full collection walked them all: on a coordinator
    under wrk (GET, 3 nodes, 2 shared cores) that was ~14 % of its CPU, and freezing them cut its CPU per
    request by 10-20 % and p99 from 45-55 ms to ~19 ms (measured). The collection thresholds stay
    CPython's: raising them saved no more here, and let cyclic garbage pin large request bodies longer."""
    gc.collect()
    gc.freeze()


async def serve_until_signal(
    runner: web.AppRunner,
    host: str,
    port: int,
    description: str = "",
    after_stop_listening: Callable[[], Awaitable[None]] | None = None,
    warning: str = "",
) -> int:
    """Listen with a set-up runner (the garbage collector tuned for serving) until SIGTERM or SIGINT, then
    stop gracefully: stop accepting, run ``after_stop_listening``, clean up. ``warning`` is logged once
    listening. The exit status: 0, or 2 when the port cannot be had."""
    site = web.TCPSite(runner, host, port, backlog=1024)
    try:
        await site.start()
    except OSError as error:
        print(f"kvnode: cannot listen on {host}:{port}: {error.strerror}", file=sys.stderr)
        await runner.cleanup()
        return 2
    _tune_gc()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("serving on http://%s:%d %s", host, port, description)
    if warning:
        log.warning("%s", warning)
    await stop.wait()
    log.info("http://%s:%d stopping", host, port)
    await site.stop()
    if after_stop_listening is not None:
        await after_stop_listening()
    await runner.cleanup()
    return 0


def run_node(config: NodeConfig) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return uvloop.run(serve(config))
