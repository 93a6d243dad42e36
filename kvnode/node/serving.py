"""Serving a node until SIGTERM or SIGINT: bind its ports, open its parts, serve, stop gracefully; the exit
status.

``serve_until_signal`` is shared with any aiohttp app served the same way (loadtest.hello), so a
comparison with a bare app measures kvnode and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import shutil
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import uvloop
from aiohttp import web

from kvnode import hot_path, memory
from kvnode.access.client_auth import BadTokensFile
from kvnode.access.connections import GuardedRunner, raise_descriptor_limit
from kvnode.access.listening import Bound, CannotListen, ListeningSite, bind
from kvnode.access.tls import TlsUnusable, server_context
from kvnode.config import NodeConfig
from kvnode.node.app import create_app
from kvnode.node.parts import NodeParts
from kvnode.node.wiring import open_parts
from kvnode.storage.keyspace import StorageUnavailable
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import ChangeRefused

__all__ = ["run_node", "serve", "serve_until_signal"]

log = logging.getLogger("kvnode")

_SHUTDOWN_TIMEOUT = 10.0  # seconds a graceful stop waits for client requests in flight


async def serve(config: NodeConfig) -> int:
    """Serve until SIGTERM or SIGINT; the process exit status. A node that cannot start says why in its
    last line, written once every part is closed (a launcher reports a failed node by its last line),
    and removes the data dir if this start made it (and any parent it made): a retry, or another data
    dir, then finds nothing left behind."""
    made = _first_missing(config.data_dir)
    try:
        status = await _serve(config)
    except CannotListen as error:
        print(f"kvnode: {error}", file=sys.stderr)
        status = 2
    if status == 2 and made is not None and not _joined(config):
        shutil.rmtree(made, ignore_errors=True)
    return status


def _first_missing(data_dir: Path) -> Path | None:
    """The outermost of ``data_dir`` and its parents that does not exist yet; None if it exists."""
    missing = None
    for path in (data_dir, *data_dir.parents):
        if path.exists():
            break
        missing = path
    return missing


def _joined(config: NodeConfig) -> bool:
    """Whether a --join stored its membership before the start failed: the cluster counts the node a
    member then, and it resumes the change when started again, so its data dir stays."""
    if not config.join or not config.data_dir.exists():
        return False
    try:
        system = SystemDb.open(config.data_dir)
    except StorageUnavailable:
        return True  # in doubt, keep it
    try:
        return system.membership.load() is not None
    except ValueError:
        return True
    finally:
        system.close()


async def _serve(config: NodeConfig) -> int:
    """Its TLS files are read and its ports bound before anything else: a node that cannot have them has
    claimed nothing (no place in a membership it would join)."""
    descriptors = raise_descriptor_limit()
    async with contextlib.AsyncExitStack() as stack:
        listeners: list[Bound] = []
        try:
            ssl_context = server_context(config)
            ports = [config.port] if config.client_port is None else [config.port, config.client_port]
            for port in ports:
                bound = bind(config.host, port, tls=ssl_context is not None, reuse_port=port != config.port)
                stack.callback(bound.close)
                listeners.append(bound)
            parts = await stack.enter_async_context(open_parts(config))
        except (StorageUnavailable, TlsUnusable, BadTokensFile, ChangeRefused) as error:
            print(f"kvnode: {error}", file=sys.stderr)
            return 2
        runner = GuardedRunner(
            create_app(parts),
            parts.connections,
            config.idle_timeout_s,
            handle_signals=False,
            access_log=logging.getLogger("kvnode.access") if config.access_log else None,
            shutdown_timeout=_SHUTDOWN_TIMEOUT,
        )
        await runner.setup()

        async def finish_uploads() -> None:
            # aiohttp's cleanup stops reading every connection at once, which would cut off a request
            # whose body is still arriving; so wait for those bodies first. Cleanup waits for the handlers.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_SHUTDOWN_TIMEOUT):
                    await parts.uploads.none_left()

        def listening() -> None:
            _log_capacity(descriptors, parts)
            if not config.cluster_secret:
                log.warning(
                    "no cluster secret (--cluster-secret-file or KVNODE_CLUSTER_SECRET): the replica "
                    "channel serves anyone who can reach %s", config.url,
                )  # fmt: skip
            if parts.tokens is None:
                log.warning(
                    "no --auth-tokens-file: clients are not authenticated, and anyone who can reach %s "
                    "may read, write and delete", config.url,
                )  # fmt: skip

        members = len(parts.membership.urls)
        description = (
            f"cluster of {members}, {config.fanout} fan-out, data in {config.data_dir}, {hot_path.describe()}"
        )
        tokens = parts.tokens
        if tokens is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, tokens.reload)
        return await serve_until_signal(
            runner,
            listeners,
            description,
            finish_uploads,
            listening,
            ssl_context,
            config.header_timeout_s,
            parts.settler,
        )


def _log_capacity(descriptors: tuple[int, int], parts: NodeParts) -> None:
    """What the node can hold, in one line: connections under the descriptor limit, and body bytes."""
    before, after = descriptors
    raised = f"raised from {before}" if after > before else "the hard limit"
    guard = parts.connections
    log.info(
        "descriptor limit %d (%s): up to %d client connections, %d more kept for peers' handshakes; "
        "%d MiB of request bodies in progress",
        after, raised, guard.max_connections, guard.peer_reserve, parts.admission.max_bytes >> 20,
    )  # fmt: skip


def _tune_gc() -> None:
    """Keep what startup made (modules, the app, the node's parts: objects that live as long as the
    process) out of the garbage collector's scans: every full collection would walk them all again, for
    nothing, in the middle of serving. The collection thresholds stay CPython's: raising them let cyclic
    garbage pin large request bodies longer. docs/node-internals.md has what this changed under load."""
    gc.collect()
    gc.freeze()


async def serve_until_signal(
    runner: web.AppRunner,
    listeners: Sequence[Bound],
    description: str = "",
    after_stop_listening: Callable[[], Awaitable[None]] | None = None,
    after_listening: Callable[[], None] | None = None,
    ssl_context: ssl.SSLContext | None = None,
    handshake_timeout_s: float | None = None,
    settler: memory.Settler | None = None,
) -> int:
    """Serve a set-up runner on bound ports (kvnode.access.listening.bind: the first is the node's own,
    a second one shared with other processes) until SIGTERM or SIGINT, the garbage collector tuned for
    serving, then stop gracefully: stop accepting, run ``after_stop_listening``, clean up.
    ``after_listening`` runs once listening (what a node says only when it serves); with ``ssl_context``
    the sites serve HTTPS only, a handshake not done within ``handshake_timeout_s`` closed, and ``settler``
    told of each connection (kvnode.access.listening). The exit
    status, 0; CannotListen when a port cannot be listened on after all (the runner cleaned up)."""
    sites = [
        ListeningSite(
            runner,
            sock,
            bound.url,
            ssl_context=ssl_context,
            handshake_timeout=handshake_timeout_s,
            settler=settler,
        )
        for bound in listeners
        for sock in bound.sockets
    ]
    for site in sites:
        try:
            await site.start()
        except OSError as error:
            await runner.cleanup()
            raise CannotListen(f"cannot listen on {site.name}: {error.strerror}") from None
    _tune_gc()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    shared = "".join(
        f", and for clients on port {bound.port} shared with this machine's nodes" for bound in listeners[1:]
    )
    log.info("serving on %s%s%s", listeners[0].url, shared, f": {description}" if description else "")
    if after_listening is not None:
        after_listening()
    await stop.wait()
    log.info("%s stopping", listeners[0].url)
    for site in sites:
        await site.stop()
    if after_stop_listening is not None:
        await after_stop_listening()
    await runner.cleanup()
    return 0


def run_node(config: NodeConfig) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    memory.tune_malloc()
    return uvloop.run(serve(config))
