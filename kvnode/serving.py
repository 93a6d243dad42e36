"""Serving a node until SIGTERM or SIGINT: open its parts, listen, stop gracefully; the exit status.

``serve_until_signal`` is shared with any aiohttp app served the same way (loadtest.hello), so a
comparison with a bare app measures kvnode and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence

import uvloop
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from kvnode.client_auth import BadTokensFile
from kvnode.config import NodeConfig, node_url
from kvnode.node import create_app
from kvnode.parts import open_parts
from kvnode.replica.auth import RateLimitedLog
from kvnode.storage import StorageUnavailable
from kvnode.tls import TlsUnusable, server_context

__all__ = ["CannotListen", "run_node", "serve", "serve_until_signal"]

log = logging.getLogger("kvnode")

_SHUTDOWN_TIMEOUT = 10.0  # seconds a graceful stop waits for client requests in flight


class CannotListen(Exception):
    """The port cannot be had (taken, or not allowed): the process's one-line reason."""


async def serve(config: NodeConfig) -> int:
    """Serve until SIGTERM or SIGINT; the process exit status. A node that cannot start says why in its
    last line, written once every part is closed (a launcher reports a failed node by its last line)."""
    try:
        return await _serve(config)
    except CannotListen as error:
        print(f"kvnode: {error}", file=sys.stderr)
        return 2


async def _serve(config: NodeConfig) -> int:
    async with contextlib.AsyncExitStack() as stack:
        try:
            parts = await stack.enter_async_context(open_parts(config))
            ssl_context = server_context(config)
        except (StorageUnavailable, TlsUnusable, BadTokensFile) as error:
            print(f"kvnode: {error}", file=sys.stderr)
            return 2
        runner = web.AppRunner(
            create_app(parts),
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

        description = f"cluster of {len(config.members)}, {config.fanout} fan-out, data in {config.data_dir}"
        warnings = []
        if not config.cluster_secret:
            warnings.append(
                "no cluster secret (--cluster-secret-file or KVNODE_CLUSTER_SECRET): the replica channel "
                f"serves anyone who can reach {config.url}"
            )
        tokens = parts.tokens
        if tokens is None:
            warnings.append(
                "no --auth-tokens-file: clients are not authenticated, and anyone who can reach "
                f"{config.url} may read, write and delete"
            )
        else:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, tokens.reload)
        return await serve_until_signal(
            runner, config.host, config.port, description, finish_uploads, warnings, ssl_context
        )


def _tune_gc() -> None:
    """Keep what startup made (modules, the app, the node's parts: objects that live as long as the
    process) out of the garbage collector's scans: every full collection would walk them all again, for
    nothing, in the middle of serving. The collection thresholds stay CPython's: raising them let cyclic
    garbage pin large request bodies longer. docs/node-internals.md has what this changed under load."""
    gc.collect()
    gc.freeze()


async def serve_until_signal(
    runner: web.AppRunner,
    host: str,
    port: int,
    description: str = "",
    after_stop_listening: Callable[[], Awaitable[None]] | None = None,
    warnings: Sequence[str] = (),
    ssl_context: ssl.SSLContext | None = None,
) -> int:
    """Listen with a set-up runner (the garbage collector tuned for serving) until SIGTERM or SIGINT, then
    stop gracefully: stop accepting, run ``after_stop_listening``, clean up. Each of ``warnings`` is logged
    once listening; with ``ssl_context`` the site serves HTTPS only. The exit status, 0; CannotListen
    when the port cannot be had (the runner cleaned up)."""
    site = web.TCPSite(runner, host, port, backlog=1024, ssl_context=ssl_context)
    url = node_url(host, port, ssl_context is not None)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        raise CannotListen(f"cannot listen on {host}:{port}: {error.strerror}") from None
    _tune_gc()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("serving on %s %s", url, description)
    for warning in warnings:
        log.warning("%s", warning)
    await stop.wait()
    log.info("%s stopping", url)
    await site.stop()
    if after_stop_listening is not None:
        await after_stop_listening()
    await runner.cleanup()
    return 0


class MalformedRequests(logging.Filter):
    """aiohttp answers a request its parser refuses (a raw non-ASCII byte in the request line, say) with
    400 before any handler runs, and logs it at ERROR with a traceback, once per request: any client could
    flood the log. It is the client's fault, so one rate-limited warning line stands for such requests."""

    def __init__(self) -> None:
        super().__init__()
        self._refusals = RateLimitedLog(log)

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        reason = (str(error.message).strip().splitlines() or ["malformed request"])[0].rstrip(":")
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
        self._refusals.warning("answered 400 to a malformed request from %s: %s", remote, reason)
        return False


def run_node(config: NodeConfig) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("aiohttp.server").addFilter(MalformedRequests())
    return uvloop.run(serve(config))
