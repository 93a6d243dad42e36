"""Real node processes on loopback for tests: start, stop, kill, freeze and restart them by PID."""

from __future__ import annotations

import dataclasses
import http.client
import os
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvnode.cli import node_argv
from kvnode.config import FanoutMode, NodeConfig
from kvnode.local_cluster import die_with_parent, free_ports, wait_until_serving

READY_TIMEOUT = 30.0


@dataclass
class Response:
    status: int
    body: bytes
    headers: Mapping[str, str]

    @property
    def text(self) -> str:
        return self.body.decode()


def request(
    url: str,
    method: str,
    path: str,
    params: Mapping[str, str | int] | None = None,
    body: bytes | None = None,
    timeout: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """One HTTP request on a fresh connection; params are percent-encoded."""
    parsed = urllib.parse.urlsplit(url)
    target = path + ("?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote) if params else "")
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=timeout)
    try:
        conn.request(method, target, body=body, headers=dict(headers or {}))
        reply = conn.getresponse()
        return Response(reply.status, reply.read(), {k.lower(): v for k, v in reply.getheaders()})
    finally:
        conn.close()


@dataclass
class Node:
    config: NodeConfig
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.config.url

    def start(self, wait: bool = True) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # die_with_parent: an interrupted test run leaves no node behind.
            self.process = subprocess.Popen(
                node_argv(self.config), stdout=log, stderr=log, preexec_fn=die_with_parent
            )
        if wait:
            self.start_wait()

    def start_wait(self) -> None:
        if not wait_until_serving(self.url, self.process, time.monotonic() + READY_TIMEOUT):
            raise RuntimeError(f"node {self.url} did not start:\n{self.log_path.read_text()[-3000:]}")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.resume()
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def freeze(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def restart(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.stop()
        self.start()

    # HTTP API shortcuts
    def get(self, key: str, **quorum: int) -> Response:
        return request(self.url, "GET", "/v0/entity", {"id": key, **_quorum(quorum)})

    def put(self, key: str, value: bytes, **quorum: int) -> Response:
        return request(self.url, "PUT", "/v0/entity", {"id": key, **_quorum(quorum)}, body=value)

    def delete(self, key: str, **quorum: int) -> Response:
        return request(self.url, "DELETE", "/v0/entity", {"id": key, **_quorum(quorum)})

    def scan(self, start: str, end: str | None = None) -> list[tuple[bytes, bytes]]:
        """This node's live records in [start, end) as (key, value), one per chunk of the response."""
        params = {"start": start} if end is None else {"start": start, "end": end}
        status, chunks = read_chunks(self.url, "/v0/entities", params)
        assert status == 200, chunks
        return [(key, value) for key, _, value in (chunk.partition(b"\n") for chunk in chunks)]


def _quorum(quorum: Mapping[str, int]) -> dict[str, int]:
    # `from` is a Python keyword: callers write from_=3.
    return {name.rstrip("_"): value for name, value in quorum.items()}


def read_chunks(
    url: str, path: str, params: Mapping[str, str], timeout: float = 30.0
) -> tuple[int, list[bytes]]:
    """GET a chunked response over a raw socket and return (status, chunks) with chunk boundaries kept,
    which http.client hides. A body that is not chunked comes back as one chunk."""
    parsed = urllib.parse.urlsplit(url)
    target = path + "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {parsed.netloc}\r\nConnection: close\r\n\r\n".encode())
        stream = sock.makefile("rb")
        status = int(stream.readline().split()[1])
        headers = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") != "chunked":
            return status, [stream.read(int(headers.get("content-length", "0")))]
        chunks = []
        while (size := int(stream.readline().split(b";")[0], 16)) > 0:
            chunks.append(stream.read(size))
            stream.readline()
        return status, chunks


@dataclass
class Cluster:
    nodes: list[Node] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __getitem__(self, index: int) -> Node:
        return self.nodes[index]

    def by_url(self, url: str) -> Node:
        return next(node for node in self.nodes if node.url == url)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.resume()
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(15)
                except subprocess.TimeoutExpired:
                    node.kill()


def make_cluster(
    tmp_path: Path,
    size: int,
    fanout: FanoutMode = "async",
    timeout_ms: int = 1000,
    clock_offsets_ms: Sequence[int] = (),
    cluster_secret: str = "",
    **options: object,
) -> Cluster:
    """Nodes (not started) on free loopback ports; ``clock_offsets_ms`` skews each node's wall clock;
    ``cluster_secret`` goes in a file in ``tmp_path`` that the nodes are given (--cluster-secret-file)."""
    ports = free_ports(size)
    urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
    if cluster_secret:
        tmp_path.mkdir(parents=True, exist_ok=True)
        secret_file = tmp_path / "cluster.secret"
        secret_file.write_text(cluster_secret)
        secret_file.chmod(0o600)
        options.update(cluster_secret=cluster_secret.encode(), cluster_secret_file=secret_file)
    base = NodeConfig(fanout=fanout, timeout_ms=timeout_ms, **options)  # type: ignore[arg-type]
    offsets = list(clock_offsets_ms) or [0] * size
    cluster = Cluster()
    for port, offset in zip(ports, offsets, strict=True):
        config = dataclasses.replace(
            base,
            port=port,
            data_dir=tmp_path / f"node-{port}",
            cluster=urls if size > 1 else (),
            clock_offset_ms=offset,
        )
        cluster.nodes.append(Node(config, tmp_path / f"node-{port}.log"))
    return cluster
