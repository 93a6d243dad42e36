"""The targets make bench (and the generator's self-benchmark) load: an aiohttp hello-world
(loadtest.hello) and a fresh kvnode cluster per fan-out mode, plain or guarded (client tokens, TLS),
started on free loopback ports, filled, and stopped by PID however the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from kvnode.access.tls import verifying_context
from kvnode.config import FanoutMode, NodeConfig
from kvnode.ops.certs import CertificatesUnavailable, ClusterCertificates
from kvnode.ops.local_cluster import LocalCluster, start_local_cluster
from kvnode.ops.ports import start_on_free_ports
from kvnode.ops.processes import NodeProcess, NodeStartError, ServerProcess
from loadtest import interruptible
from loadtest.fill import fill
from loadtest.workload import Workload

__all__ = [
    "GUARDS",
    "HOST",
    "NODES",
    "BenchError",
    "fill_cluster",
    "guarded",
    "hello_world",
    "kvnode_cluster",
]

HOST = "127.0.0.1"  # loopback only: nothing here listens on or talks to another machine
NODES = 3
# What guards the nodes run with: none (plain), client tokens, TLS, or both (docs/security.md).
GUARDS = ("plain", "tokens", "tls", "tls+tokens")
TOKEN = "bench-token"  # a throwaway readwrite token, for the guarded rows only
_FILL_TIMEOUT = 300.0  # seconds the fill may take in all


class BenchError(Exception):
    """A run that cannot go on; main prints the message as one line and exits 1."""


# --- the servers ----------------------------------------------------------------------------------


@contextlib.contextmanager
def hello_world() -> Iterator[LocalCluster[ServerProcess]]:
    """The hello-world app on a free port, as a cluster of one; stopped on exit."""

    def start(ports: list[int]) -> LocalCluster[ServerProcess]:
        argv = [sys.executable, "-m", "loadtest.hello", "--host", HOST, "--port", str(ports[0])]
        app = LocalCluster([ServerProcess(argv, f"http://{HOST}:{ports[0]}")])
        app.start()
        return app

    try:
        app = start_on_free_ports(1, start)
    except NodeStartError as error:
        raise BenchError(f"the hello-world app did not start: {error}") from None
    try:
        yield app
    finally:
        app.stop()


@contextlib.contextmanager
def kvnode_cluster(
    mode: FanoutMode, data_dir: Path, guard: str = "plain"
) -> Iterator[LocalCluster[NodeProcess]]:
    """A fresh cluster of NODES with ``mode`` fan-out and ``guard`` (GUARDS), data in ``data_dir`` and
    the nodes' output in ``data_dir/logs``, so the terminal shows only the benchmark's progress (a node
    that fails to start is named with its last line); stopped on exit."""
    base = guarded(NodeConfig(host=HOST, data_dir=data_dir, fanout=mode), guard)
    try:
        nodes = start_local_cluster(base, NODES, NodeProcess, log_dir=data_dir / "logs")
    except NodeStartError as error:
        raise BenchError(f"a {mode} cluster of {NODES} did not start: {error}") from None
    try:
        yield nodes
    finally:
        nodes.stop()


def guarded(config: NodeConfig, guard: str) -> NodeConfig:
    """``config`` with the guard's settings: a tokens file holding TOKEN, and a throwaway CA's
    certificate (one for every node: they share 127.0.0.1), made in the data dir."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    if "tokens" in guard:
        tokens = config.data_dir / "tokens"
        tokens.write_text(f"{TOKEN} readwrite\n")
        tokens.chmod(0o600)
        config = dataclasses.replace(config, auth_tokens_file=tokens)
    if "tls" in guard:
        certificates = ClusterCertificates(config.data_dir / "tls")
        try:
            certificates.make(["bench"])
        except CertificatesUnavailable as error:
            raise BenchError(str(error)) from None
        node = certificates.node("bench")
        config = dataclasses.replace(config, tls_cert=node.cert, tls_key=node.key, tls_ca=node.ca)
    return config


def fill_cluster(
    urls: Sequence[str], keys: int, value_size: int, concurrency: int, config: NodeConfig | None = None
) -> None:
    """Every key of the GET space written (failed PUTs retried), with the token and CA the nodes'
    ``config`` asks for; BenchError if some never take."""
    started = time.monotonic()
    token = TOKEN if config is not None and config.auth_tokens_file is not None else ""
    tls = verifying_context(config.tls_ca) if config is not None and config.tls_ca is not None else None
    try:
        written, failures = interruptible.run(
            _fill_in_time(urls, Workload("put", keys, value_size, token=token), concurrency, tls)
        )
    except TimeoutError:
        raise BenchError(f"fill took over {_FILL_TIMEOUT:.0f}s") from None
    if failures:
        raise BenchError(f"fill: {keys - written} of {keys} keys failed ({dict(failures)})")
    elapsed = time.monotonic() - started
    progress(f"  filled {keys} keys of {value_size} bytes in {elapsed:.1f}s ({keys / elapsed:,.0f} PUT/s)")


async def _fill_in_time(
    urls: Sequence[str], workload: Workload, concurrency: int, tls: ssl.SSLContext | None
) -> tuple[int, Counter[str]]:
    async with asyncio.timeout(_FILL_TIMEOUT):
        return await fill(urls, workload, concurrency, say=progress, tls=tls)


def progress(message: str) -> None:
    """One line of progress on stderr (stdout is the report)."""
    print(message, file=sys.stderr, flush=True)
