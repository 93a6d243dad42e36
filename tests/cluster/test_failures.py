"""Replica failures on real clusters: killed (SIGKILL), frozen (SIGSTOP) and garbage-speaking replicas.

Every request must end with the right answer or a 504 within about the replica timeout, never hang; the
coordinator keeps serving keys that avoid the broken replica; and the cluster recovers once the replica
is back, without restarting the others.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Literal, get_args

import pytest

from kvnode.config import FanoutMode, NodeConfig
from kvnode.ops.ports import free_ports
from kvnode.replica.channel import wire
from tests.harness import (
    FANOUTS,
    Cluster,
    ClusterFactory,
    Node,
    Response,
    fresh_key,
    key_where,
    poll,
    written,
)

Breakage = Literal["kill", "freeze"]
BREAKAGES: tuple[Breakage, ...] = get_args(Breakage)
TIMEOUT_MS = 500
BOUND = 5.0  # seconds: "about the timeout", with room for a loaded machine; a hang would take far longer


def timed(call: Callable[[], Response]) -> tuple[Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def expect(
    call: Callable[[], Response], status: int, body: bytes | None = None, *, blames: str | None = None
) -> Response:
    """Run call; assert it answers status (and body) within BOUND seconds. A 504 must give a one-line
    reason, naming the replica blames when given."""
    response, seconds = timed(call)
    assert response.status == status, (response.status, response.body)
    if body is not None:
        assert response.body == body
    if status == 504:
        assert response.body.endswith(b"\n") and response.body.count(b"\n") == 1, response.body
        if blames is not None:
            assert blames.encode() in response.body, response.body
    assert seconds < BOUND, f"took {seconds:.2f}s"
    return response


def break_node(node: Node, how: Breakage) -> None:
    if how == "kill":
        node.kill()
    else:
        node.freeze()


def repair_node(node: Node, how: Breakage) -> None:
    if how == "kill":
        node.restart()
    else:
        node.resume()


@contextlib.contextmanager
def broken(node: Node, how: Breakage) -> Iterator[None]:
    """The node is killed or frozen inside the block; a frozen node is always continued afterwards."""
    break_node(node, how)
    try:
        yield
    finally:
        if how == "freeze":
            node.resume()


def pids(cluster: Cluster) -> list[int]:
    return [node.process.pid for node in cluster if node.process is not None]


@pytest.mark.parametrize("how", BREAKAGES)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_broken_replica_gives_the_answer_or_504_within_the_timeout(
    start_cluster: ClusterFactory, fanout: FanoutMode, how: Breakage
) -> None:
    cluster = start_cluster(3, fanout=fanout, timeout_ms=TIMEOUT_MS)
    victim = cluster[2]
    # The victim is the key's primary, so a sync coordinator asks it first.
    key = key_where(cluster.urls, "broken", lambda order: order[0] == victim.url)
    assert cluster[0].put(key, b"before", ack=3, from_=3).status == 201
    with broken(victim, how):
        for coordinator in cluster[0], cluster[1]:
            # A write that answers 504 may still be applied on the live replicas (async asks all
            # three at once), so each round checks the failing quorums first, then writes and reads.
            expect(partial(coordinator.get, key, ack=3, from_=3), 504)
            expect(partial(coordinator.put, key, b"all", ack=3, from_=3), 504)
            expect(partial(coordinator.delete, key, ack=3, from_=3), 504)
            value = f"during-{coordinator.url}".encode()
            expect(partial(coordinator.put, key, value, ack=2, from_=3), 201)
            expect(partial(coordinator.get, key, ack=2, from_=3), 200, value)
            expect(partial(cluster[1].get, key, ack=2, from_=3), 200, value)
        expect(partial(cluster[1].delete, key, ack=2, from_=3), 202)
        expect(partial(cluster[0].get, key, ack=2, from_=3), 404)


@pytest.mark.parametrize("how", BREAKAGES)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_coordinator_keeps_serving_keys_that_avoid_the_broken_replica(
    start_cluster: ClusterFactory, fanout: FanoutMode, how: Breakage
) -> None:
    cluster = start_cluster(3, fanout=fanout, timeout_ms=TIMEOUT_MS)
    coordinator, other, victim = cluster[0], cluster[1], cluster[2]
    two = [key_where(cluster.urls, "avoid-2", lambda order: victim.url not in order[:2]) for _ in range(6)]
    one = [key_where(cluster.urls, "avoid-1", lambda order: order[0] == other.url) for _ in range(3)]
    with broken(victim, how):
        # Touch the victim once, so the coordinator has noticed it is broken (or is noticing).
        expect(partial(coordinator.put, fresh_key("touch"), b"x", ack=3, from_=3), 504)
        for key in two:
            expect(partial(coordinator.put, key, key.encode(), ack=2, from_=2), 201)
            expect(partial(coordinator.get, key, ack=2, from_=2), 200, key.encode())
            expect(partial(other.get, key, ack=2, from_=2), 200, key.encode())
        for key in one:
            expect(partial(coordinator.put, key, b"one", ack=1, from_=1), 201)
            expect(partial(coordinator.get, key, ack=1, from_=1), 200, b"one")
            expect(partial(coordinator.delete, key, ack=1, from_=1), 202)
            expect(partial(other.get, key, ack=1, from_=1), 404)


@pytest.mark.parametrize("fanout", FANOUTS)
def test_requests_avoiding_a_frozen_replica_do_not_wait_for_one_that_waits_on_it(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    """While one request waits out the timeout on a frozen replica, the coordinator answers others."""
    timeout_ms = 2000
    cluster = start_cluster(3, fanout=fanout, timeout_ms=timeout_ms)
    coordinator, victim = cluster[0], cluster[2]
    stuck_key = key_where(cluster.urls, "stuck", lambda order: order[0] == victim.url)
    free_keys = [key_where(cluster.urls, "free", lambda order: victim.url not in order[:2]) for _ in range(5)]
    stuck: list[tuple[Response, float]] = []
    with broken(victim, "freeze"):
        waiter = threading.Thread(
            target=lambda: stuck.append(timed(partial(coordinator.get, stuck_key, ack=3)))
        )
        waiter.start()
        fast: list[float] = []
        while waiter.is_alive():
            key = free_keys[len(fast) % len(free_keys)]
            response, seconds = timed(partial(coordinator.put, key, b"fast", ack=2, from_=2))
            assert response.status == 201, response
            if waiter.is_alive():
                fast.append(seconds)
        waiter.join()
    ((response, seconds),) = stuck
    assert response.status == 504, response
    assert seconds >= timeout_ms / 1000 * 0.8, (
        f"the stuck request ended after {seconds:.2f}s, before the timeout"
    )
    assert seconds < timeout_ms / 1000 + BOUND
    assert len(fast) >= 5, f"only {len(fast)} requests answered while one waited on the frozen replica"
    assert max(fast) < timeout_ms / 1000 / 2, f"a request avoiding the frozen replica took {max(fast):.2f}s"


def test_async_answers_504_at_once_when_a_failure_puts_ack_out_of_reach(
    start_cluster: ClusterFactory,
) -> None:
    """One replica killed (fails at once), one frozen (would time out): ack=3 is out of reach after the
    first failure, so the answer must not wait for the frozen one; ack=2 has to wait for it."""
    timeout_ms = 3000
    cluster = start_cluster(3, fanout="async", timeout_ms=timeout_ms)
    coordinator, killed, frozen = cluster[0], cluster[1], cluster[2]
    key = fresh_key("out-of-reach")
    expect(partial(coordinator.put, key, b"v", ack=3, from_=3), 201)  # every channel is up
    killed.kill()
    with broken(frozen, "freeze"):
        _, seconds = timed(partial(expect, partial(coordinator.put, key, b"w", ack=3, from_=3), 504))
        assert seconds < timeout_ms / 1000 / 2, f"ack=3 took {seconds:.2f}s: it waited for the frozen replica"
        _, seconds = timed(partial(expect, partial(coordinator.get, key, ack=2, from_=3), 504))
        assert seconds >= timeout_ms / 1000 * 0.8, f"ack=2 gave up after {seconds:.2f}s, before the timeout"


@pytest.mark.parametrize("how", BREAKAGES)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_cluster_recovers_after_the_replica_returns(
    start_cluster: ClusterFactory, fanout: FanoutMode, how: Breakage
) -> None:
    cluster = start_cluster(3, fanout=fanout, timeout_ms=TIMEOUT_MS)
    victim = cluster[2]
    survivors = [cluster[0], cluster[1]]
    survivor_pids = pids(Cluster(survivors))
    keys = [key_where(cluster.urls, "recover", lambda order: order[0] == victim.url) for _ in range(2)]
    with broken(victim, how):
        for key in keys:
            expect(partial(survivors[0].put, key, b"while-broken", ack=2, from_=3), 201)
            expect(partial(survivors[1].put, key, b"all", ack=3, from_=3), 504)
        repair_node(victim, how)
    # Every coordinator (the returned one too) gets a 3/3 write through within the deadline...
    for coordinator in cluster:
        for key in keys:
            value = f"recovered-{coordinator.url}".encode()
            put = partial(coordinator.put, key, value, ack=3, from_=3)
            poll(put, written, 20, f"a 3/3 write through {coordinator.url}")
    # ...and then every node reads the last of them with 3/3, at once.
    for reader in cluster:
        for key in keys:
            expect(partial(reader.get, key, ack=3, from_=3), 200, f"recovered-{cluster[2].url}".encode())
    assert pids(Cluster(survivors)) == survivor_pids, "the other nodes were restarted"


def connections_to(pid: int, port: int) -> int:
    """TCP sockets of process pid whose remote end is 127.0.0.1:port (from /proc, so Linux only)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = fd.readlink().name
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                count += 1
    return count


@pytest.mark.parametrize("fanout", FANOUTS)
def test_reconnecting_to_a_frozen_replica_leaks_no_connections_and_logs_no_errors(
    start_cluster: ClusterFactory, fanout: FanoutMode
) -> None:
    """The coordinator first meets the replica frozen: every reconnect attempt times out. Each attempt's
    connection must be closed when it is given up, not left open until the replica answers."""
    cluster = start_cluster(3, fanout=fanout, timeout_ms=TIMEOUT_MS)
    coordinator, victim = cluster[0], cluster[2]
    assert coordinator.process is not None
    key = key_where(cluster.urls, "leak", lambda order: order[0] == victim.url)
    with broken(victim, "freeze"):
        # Keep asking for about 4 s: with backoff up to 1 s that is five or more reconnect attempts.
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            expect(partial(coordinator.put, key, b"v", ack=2, from_=3), 201)
            time.sleep(0.05)
        leaked = connections_to(coordinator.process.pid, victim.config.port)
    assert leaked <= 1, f"{leaked} connections to the frozen replica are open (at most one attempt at a time)"
    # The replica is back: the cluster recovers, and the coordinator logged no error on the way.
    poll(
        partial(coordinator.put, key, b"all", ack=3, from_=3),
        written,
        20,
        "a 3/3 write after the replica resumed",
    )
    log = coordinator.log_path.read_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 300 :][:3000]


# A "replica" that is not kvnode: a plain TCP server on a port of the cluster list.

GarbageMode = Literal["garbage", "close", "not-upgrade", "bad-frames", "bad-replies", "silent", "rejects"]
GARBAGE_MODES: tuple[GarbageMode, ...] = get_args(GarbageMode)[:-1]  # "rejects" has its own test
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class GarbageReplica(socketserver.ThreadingTCPServer):
    """Accepts connections on 127.0.0.1 and misbehaves in one of GARBAGE_MODES."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, mode: GarbageMode) -> None:
        self.mode = mode
        self.connections = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _GarbageHandler)
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> GarbageReplica:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(10)

    def switch(self, mode: GarbageMode) -> None:
        """Misbehave another way from now on; connections made under the old mode are cut."""
        self.mode = mode
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def track(self, sock: socket.socket, is_open: bool) -> None:
        with self._lock:
            if is_open:
                self.connections += 1
                self._open.add(sock)
            else:
                self._open.discard(sock)


class _GarbageHandler(socketserver.StreamRequestHandler):
    server: GarbageReplica

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def handle(self) -> None:
        mode = self.server.mode
        if mode == "close":
            return  # closed without a word
        headers = self._read_headers()
        if headers is None:
            return
        if mode == "garbage":
            self.wfile.write(b"\x00\xffNOT HTTP AT ALL\r\n\x01\x02\r\n\r\n")
        elif mode == "not-upgrade":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello")
        elif mode == "silent":
            while self.rfile.read(1):
                pass  # read until the client gives up
        else:
            accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + _WS_GUID).digest())
            self.wfile.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            self.wfile.flush()
            self._answer_frames(mode)

    def _read_headers(self) -> dict[str, str] | None:
        if not self.rfile.readline():
            return None
        headers: dict[str, str] = {}
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return headers

    def _answer_frames(self, mode: str) -> None:
        while (frame := self._read_frame()) is not None:
            opcode, payload = frame
            if opcode == 0x8:  # close
                return
            if mode == "bad-frames":
                self.wfile.write(b"\x8f\x03abc\xff\xff\xff\xff")  # a reserved opcode, then noise
            else:
                try:
                    calls = wire.decode_calls(payload)
                except wire.WireError:
                    return
                if mode == "rejects":
                    # A well-formed FAILED reply whose reason spans lines.
                    status, answer = wire.Status.FAILED, b"disk on fire\nsecond line\r\nthird line"
                else:
                    # Well-framed replies with the right call ids, but answers no replica gives: a FOUND
                    # with a truncated record for a READ, a FOUND for a WRITE.
                    status, answer = wire.Status.FOUND, b"xx"
                reply = b"".join(wire.encode_reply(call.call_id, status, answer) for call in calls)
                self.wfile.write(_server_frame(reply))
            self.wfile.flush()

    def _read_frame(self) -> tuple[int, bytes] | None:
        head = self.rfile.read(2)
        if len(head) < 2:
            return None
        opcode, length = head[0] & 0x0F, head[1] & 0x7F
        if length == 126:
            length = int.from_bytes(self.rfile.read(2), "big")
        elif length == 127:
            length = int.from_bytes(self.rfile.read(8), "big")
        mask = self.rfile.read(4) if head[1] & 0x80 else b"\x00" * 4
        payload = self.rfile.read(length)
        return opcode, bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))


def _server_frame(payload: bytes) -> bytes:
    size = len(payload)
    if size < 126:
        header = bytes([0x82, size])
    elif size < 65536:
        header = bytes([0x82, 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x82, 127]) + size.to_bytes(8, "big")
    return header + payload


@contextlib.contextmanager
def cluster_with_garbage_replica(
    tmp_path: Path, fanout: FanoutMode
) -> Iterator[tuple[Cluster, GarbageReplica]]:
    """Two real nodes and one GarbageReplica, the latter's URL last in the cluster list."""
    with GarbageReplica("garbage") as fake:
        ports = free_ports(2)
        urls = (*(f"http://127.0.0.1:{port}" for port in ports), fake.url)
        cluster = Cluster()
        for port in ports:
            config = NodeConfig(
                port=port,
                data_dir=tmp_path / f"node-{port}",
                cluster=urls,
                fanout=fanout,
                timeout_ms=TIMEOUT_MS,
            )
            cluster.nodes.append(Node(config, tmp_path / f"node-{port}.log"))
        try:
            cluster.start()
            yield cluster, fake
        finally:
            cluster.stop()


@pytest.mark.parametrize("fanout", FANOUTS)
def test_a_replica_answering_garbage_counts_as_failed(tmp_path: Path, fanout: FanoutMode) -> None:
    """One cluster per fan-out; the fake replica misbehaves in each way in turn (cutting its connections
    in between), and the coordinators must count it as failed every time and keep serving."""
    with cluster_with_garbage_replica(tmp_path, fanout) as (cluster, fake):
        urls = [*cluster.urls, fake.url]
        for mode in GARBAGE_MODES:
            connections_before = fake.connections
            fake.switch(mode)
            # Coordinators that gave up on the fake retry with backoff: ask until both reconnected to it.
            deadline = time.monotonic() + 15
            while fake.connections < connections_before + len(cluster.nodes):
                assert time.monotonic() < deadline, f"mode {mode!r}: the coordinators do not reconnect"
                for coordinator in cluster:
                    expect(partial(coordinator.get, "probe", ack=3, from_=3), 504, blames=fake.url)
                time.sleep(0.05)
            # The fake is the keys' primary, so a sync coordinator asks it first.
            keys = [key_where(urls, f"garbage-{mode}", lambda order: order[0] == fake.url) for _ in range(2)]
            for key in keys:
                for coordinator in cluster:
                    value = f"{mode}-{coordinator.url}".encode()
                    with described(f"fake replica in mode {mode!r}, coordinator {coordinator.url}"):
                        expect(partial(coordinator.put, key, value, ack=2, from_=3), 201)
                        expect(partial(coordinator.get, key, ack=2, from_=3), 200, value)
                        expect(partial(coordinator.put, key, b"x", ack=3, from_=3), 504, blames=fake.url)
                        expect(partial(coordinator.get, key, ack=3, from_=3), 504, blames=fake.url)
                        expect(partial(coordinator.delete, key, ack=2, from_=3), 202)
                        expect(partial(coordinator.get, key, ack=2, from_=3), 404)
        for node in cluster:
            assert node.process is not None and node.process.poll() is None, f"{node.url} died"


@contextlib.contextmanager
def described(description: str) -> Iterator[None]:
    """Prefix an assertion failure inside the block with description."""
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{description}: {error}") from error


def test_a_replica_error_spanning_lines_still_gives_a_one_line_504(tmp_path: Path) -> None:
    """The 504 reason quotes the replicas' errors; a peer's error text with line breaks must not break
    the one-line reason."""
    with cluster_with_garbage_replica(tmp_path, "async") as (cluster, fake):
        fake.switch("rejects")
        urls = [*cluster.urls, fake.url]
        key = key_where(urls, "rejects", lambda order: True)
        for coordinator in cluster:
            expect(partial(coordinator.put, key, b"v", ack=2, from_=3), 201)
            response = expect(partial(coordinator.get, key, ack=3, from_=3), 504, blames=fake.url)
            assert b"disk on fire" in response.body, response.body  # the replica really answered FAILED
