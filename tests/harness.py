"""What the tests share: real node processes on loopback (kvnode.ops's, with HTTP shortcuts) to start,
stop, kill, freeze and restart by PID, ``python -m kvnode`` run as a user runs it, and the helpers more
than one test file uses: fresh keys and keys placed as a test needs, a node's /v0/stats and /metrics
read, polling with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import itertools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar, get_args

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvnode.config import FanoutMode, NodeConfig, ReplicationFactor
from kvnode.ops.local_cluster import LocalCluster, start_local_cluster
from kvnode.ops.processes import Child, NodeProcess, ServerProcess
from kvnode.topology.placement import Placement
from tests import forkserver


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
    context: ssl.SSLContext | None = None,
) -> Response:
    """One HTTP request on a fresh connection (HTTPS verified with ``context`` for an https:// URL);
    params are percent-encoded."""
    parsed = urllib.parse.urlsplit(url)
    target = path + ("?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote) if params else "")
    host = parsed.hostname or "127.0.0.1"
    conn = (
        http.client.HTTPSConnection(host, parsed.port, timeout=timeout, context=context)
        if parsed.scheme == "https"
        else http.client.HTTPConnection(host, parsed.port, timeout=timeout)
    )
    try:
        conn.request(method, target, body=body, headers=dict(headers or {}))
        reply = conn.getresponse()
        return Response(reply.status, reply.read(), {k.lower(): v for k, v in reply.getheaders()})
    finally:
        conn.close()


class Node(NodeProcess):
    """A node process (log in a file) with shortcuts for the HTTP API. Every one made by hand (not by
    :func:`launch_cluster`, whose caller stops its cluster) is in ``Node.loose``, so that conftest stops
    those a test leaves running."""

    loose: ClassVar[list[Node]] = []

    def __init__(self, config: NodeConfig, log_path: Path | None) -> None:
        assert log_path is not None, "a test node logs to a file"
        super().__init__(config, log_path)
        self.log_path: Path = log_path
        Node.loose.append(self)

    def _launch(self, stdout: int | IO[bytes]) -> Child:
        """Forked from the fork server, warm: it has imported what a node imports (tests.forkserver).
        A node run inside another command (unshare, say) starts as that command."""
        if isinstance(stdout, int) or not forkserver.forks(self.argv):
            return super()._launch(stdout)
        env = {**os.environ, **self.extra_env}
        return forkserver.spawn(self.argv, env, stdout.fileno(), new_session=self.new_session)

    def get(self, key: str, **quorum: int | str) -> Response:
        return request(self.url, "GET", "/v0/entity", {"id": key, **_quorum(quorum)})

    def put(self, key: str, value: bytes, **quorum: int | str) -> Response:
        return request(self.url, "PUT", "/v0/entity", {"id": key, **_quorum(quorum)}, body=value)

    def delete(self, key: str, **quorum: int | str) -> Response:
        return request(self.url, "DELETE", "/v0/entity", {"id": key, **_quorum(quorum)})

    def scan(self, start: str, end: str | None = None) -> list[tuple[bytes, bytes]]:
        """This node's live records in [start, end) as (key, value), one per chunk of the response."""
        params = {"start": start} if end is None else {"start": start, "end": end}
        status, chunks = read_chunks(self.url, "/v0/entities", params)
        assert status == 200, chunks
        return [(key, value) for key, _, value in (chunk.partition(b"\n") for chunk in chunks)]


def listed_on(node: Node, key: str) -> bytes | None:
    """The value of key in node's own range listing (its local live records), or None."""
    found = node.scan(key, key + "\x00")
    return found[0][1] if found else None


def _quorum(quorum: Mapping[str, int | str]) -> dict[str, int | str]:
    # `from` is a Python keyword: callers write from_=3; ack is a number or a level by name (ack="quorum").
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


class Cluster(LocalCluster[Node]):
    """Nodes started and stopped together (kvnode.ops.local_cluster), found by URL."""

    def by_url(self, url: str) -> Node:
        return next(node for node in self.nodes if node.url == url)

    def running(self) -> list[Node]:
        return [node for node in self.nodes if node.running]


def miss_while_restored(node: Node, change: Callable[[], bool]) -> None:
    """Make ``node`` a stale replica of what ``change`` writes, deterministically: a copy of its data dir
    is taken while it is stopped, ``change`` runs with every node up (it must write to every replica
    with ack = from, and return whether it was acknowledged), then the copy is put back, as if the node's
    disk had been restored from a backup. No hint or repair can race the scenario: no write was missed."""
    data_dir = node.config.data_dir
    copy = data_dir.with_name(data_dir.name + "-before")
    node.stop()
    shutil.copytree(data_dir, copy)
    node.start()
    assert change(), "the change every replica takes was not acknowledged"
    node.stop()
    shutil.rmtree(data_dir)
    copy.rename(data_dir)
    node.start()


def launch_cluster(
    tmp_path: Path,
    size: int,
    fanout: FanoutMode = "async",
    timeout_ms: int = 1000,
    clock_offsets_ms: Sequence[int] = (),
    cluster_secret: str = "",
    **options: object,
) -> Cluster:
    """A running cluster of ``size`` nodes on free loopback ports, data and logs in ``tmp_path``; started
    again on fresh ports if another process takes one of them first. ``clock_offsets_ms`` skews each
    node's wall clock (KVNODE_CLOCK_OFFSET_MS); ``cluster_secret`` goes in a file in ``tmp_path`` that the
    nodes are given (--cluster-secret-file)."""
    if cluster_secret:
        secret_file = write_secret_file(tmp_path / "cluster.secret", cluster_secret)
        options.update(cluster_secret=cluster_secret.encode(), cluster_secret_file=secret_file)
    base = node_config(data_dir=tmp_path, fanout=fanout, timeout_ms=timeout_ms, **options)
    offsets = list(clock_offsets_ms) or [0] * size

    def skew(index: int, config: NodeConfig, _: list[int]) -> NodeConfig:
        return dataclasses.replace(config, clock_offset_ms=offsets[index])

    cluster = Cluster(start_local_cluster(base, size, Node, log_dir=tmp_path, configure=skew).nodes)
    Node.loose[:] = [node for node in Node.loose if node not in cluster.nodes]
    return cluster


def node_config(**options: Any) -> NodeConfig:
    """A NodeConfig of these options, in which a test may give ``replication_factor`` as an int (the same
    N in every datacenter)."""
    if isinstance(options.get("replication_factor"), int):
        options["replication_factor"] = ReplicationFactor(options["replication_factor"])
    return NodeConfig(**options)


def write_secret_file(path: Path, secret: str) -> Path:
    """A secret file as kvnode accepts it (a cluster secret, client tokens): readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secret)
    path.chmod(0o600)
    return path


# --- python -m kvnode as a user runs it ----------------------------------------------------------------

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent  # the repository's root
DEADLINE = 30.0  # generous: other test runs share this machine


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any KVNODE_* variable, plus extra."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KVNODE_")}
    env.update(extra)
    return env


def run_kvnode(
    args: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m kvnode ARGS`` to completion (for commands that must exit on their own)."""
    return subprocess.run(
        [sys.executable, "-m", "kvnode", *args],
        cwd=cwd,
        env=dict(env) if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )


def assert_exit_2_with_one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, repr(result.stderr)
    assert result.stderr.strip()
    assert result.stdout == ""
    return result.stderr


def refuses_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def serves(port: int) -> bool:
    try:
        return request(f"http://127.0.0.1:{port}", "GET", "/v0/status", timeout=5).status == 200
    except OSError:
        return False


@contextlib.contextmanager
def started(
    args: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """A long-running ``python -m kvnode`` process, SIGTERMed (then SIGKILLed) by PID when done."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kvnode", *args], cwd=cwd, env=dict(env), stdout=out, stderr=out
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


ClusterFactory = Callable[..., Cluster]  # the start_cluster fixture (tests/conftest.py)
FANOUTS: tuple[FanoutMode, ...] = get_args(FanoutMode)

CONVERGE_S = 15.0  # bound on waiting for background work (hints, repair) on a loaded 2-core machine


def stats(node: Node, reset: bool = False) -> dict[str, Any]:
    """The node's GET /v0/stats, parsed; ``reset`` (?reset=1) starts a new measurement window after it."""
    response = request(node.url, "GET", "/v0/stats", {"reset": 1} if reset else None)
    assert response.status == 200
    result: dict[str, Any] = json.loads(response.body)
    return result


def poll(
    attempt: Callable[[], T], done: Callable[[T], bool], seconds: float = CONVERGE_S, what: str = "condition"
) -> T:
    """Repeat ``attempt`` until ``done`` holds for its result, and return that result; fail after the
    deadline, naming ``what`` and the last result. The one way a test waits for something."""
    deadline = time.monotonic() + seconds
    while True:
        result = attempt()
        if done(result):
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}; last: {result!r:.2000}"
        time.sleep(0.05)


def wait_for(condition: Callable[[], bool], seconds: float = CONVERGE_S, what: str = "condition") -> None:
    """Poll ``condition`` until it holds; fail after the deadline."""
    poll(condition, bool, seconds, what)


async def eventually(
    condition: Callable[[], bool], seconds: float = CONVERGE_S, what: str = "condition"
) -> None:
    """``wait_for`` inside a running event loop: the loop keeps running while the test waits."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def group_written(wait: Callable[[Callable[[Exception | None], None]], None]) -> None:
    """Return once a group commit's pending writes are stored, as a waiter of ``wait`` (GroupCommit.wait,
    Storage.when_written): at once when none is pending; raises their write's failure."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    wait(lambda failure: future.set_result(None) if failure is None else future.set_exception(failure))
    await future


def written(answer: Response) -> bool:
    """For ``poll``: a write answered 201; until then only 504 (a replica still coming back) is fine."""
    assert answer.status in (201, 504), answer
    return answer.status == 201


def wait_for_log(node: Node, text: str, seconds: float = CONVERGE_S) -> str:
    """Wait until ``node``'s log holds ``text``; the log then."""
    return poll(
        lambda: node.log_path.read_text(errors="replace"),
        lambda log: text in log,
        seconds,
        f"{text!r} in {node.url}'s log",
    )


_serial = itertools.count()


def fresh_key(label: str) -> str:
    """A key no test has used yet: the label, a counter and the monotonic clock."""
    return f"{label}-{next(_serial)}-{time.monotonic_ns()}"


def key_where(urls: Sequence[str], label: str, wanted: Callable[[list[str]], bool]) -> str:
    """A fresh key whose full replica order over ``urls`` (most preferred first) satisfies wanted."""
    placement = Placement(urls)
    for _ in range(10_000):
        key = fresh_key(label)
        if wanted(placement.order(key.encode())):
            return key
    raise AssertionError(f"no key found for {label}")


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(node: ServerProcess) -> Samples:
    """The node's GET /metrics, parsed: one value per (sample name, labels)."""
    response = request(node.url, "GET", "/metrics")
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def rss_kib(pid: int) -> int:
    """The process's anonymous resident memory: its heap, not LevelDB's memory-mapped table files (page
    cache the kernel can drop, which grows with the data written whatever the bounds)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


def inflight(node: Node) -> int:
    return int(stats(node)["requests"]["inflight"])


@contextlib.contextmanager
def slow_uploads(node: Node, count: int, key: str = "slow") -> Iterator[list[socket.socket]]:
    """``count`` PUTs whose headers arrived and whose body never comes: each holds an in-flight slot."""
    port = int(node.url.rsplit(":", 1)[1])
    sockets = []
    try:
        for index in range(count):
            sock = socket.create_connection(("127.0.0.1", port))
            head = f"PUT /v0/entity?id={key}{index} HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
            sock.sendall(head.encode() + b"abc")
            sockets.append(sock)
        wait_for(lambda: inflight(node) == count, what=f"{count} requests in flight")
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


# TLS tests make their certificates with the openssl command, as `cluster --tls` does.
needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command (apt-get install openssl)"
)
