"""A node process's life: restarts keep data, signals stop it cleanly, a port in use ends it with one
line. Real processes on loopback, ended by PID."""

from __future__ import annotations

import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import plyvel
import pytest

from kvnode.ops.ports import free_ports
from kvnode.storage.system_db import DATA_FORMAT, FORMAT_PREFIX
from tests.harness import (
    DEADLINE,
    ClusterFactory,
    Node,
    assert_exit_2_with_one_line,
    refuses_connections,
    run_kvnode,
    wait_for,
)

# --- restarts and signals ---------------------------------------------------------------------------


def test_restart_after_sigterm_keeps_data(node: Node) -> None:
    values = {f"key-{number}": f"value {number}".encode() * number for number in range(50)}
    for key, value in values.items():
        assert node.put(key, value).status == 201
    assert node.delete("key-7").status == 202
    assert node.stop() == 0  # SIGTERM: exit status 0
    assert refuses_connections(node.config.port)
    assert "Traceback" not in node.log_path.read_text()
    node.start()
    for key, value in values.items():
        response = node.get(key)
        if key == "key-7":
            assert response.status == 404
        else:
            assert (response.status, response.body) == (200, value), key
    assert len(node.scan("key-")) == 49


@pytest.mark.parametrize("size", [1, 3])
def test_restart_after_sigkill_of_every_node_keeps_acknowledged_writes(
    start_cluster: ClusterFactory, size: int
) -> None:
    """Writes sent at once through every node (so that group commits gather several, the local
    replica's and the peers' calls alike), each acknowledged by every replica (ack = from = size); then
    every node killed: each node still holds each write."""
    cluster = start_cluster(size)
    values = {f"key-{number:03d}": os.urandom(number * 10) for number in range(200)}

    def put(index: int, key: str) -> int:
        return cluster[index % size].put(key, values[key], ack=size).status

    with ThreadPoolExecutor(max_workers=16) as pool:
        assert set(pool.map(put, range(len(values)), values)) == {201}
    assert cluster[0].delete("key-100", ack=size).status == 202
    assert cluster[-1].put("key-101", b"overwritten", ack=size).status == 201
    for node in cluster:
        node.kill()
        assert node.process is not None and node.process.returncode == -signal.SIGKILL
    for node in cluster:
        node.start()
    values.pop("key-100")
    values["key-101"] = b"overwritten"
    expected = sorted((key.encode(), value) for key, value in values.items())
    for node in cluster:
        assert node.scan("key-") == expected, node.url  # its own records: every replica kept them
    assert cluster[0].get("key-100").status == 404


def test_sigint_stops_the_node_with_exit_status_0(node: Node) -> None:
    assert node.put("k", b"v").status == 201
    assert node.process is not None
    node.process.send_signal(signal.SIGINT)
    assert node.process.wait(DEADLINE) == 0
    assert refuses_connections(node.config.port)
    assert "Traceback" not in node.log_path.read_text()
    node.start()
    assert node.get("k").body == b"v"


def test_request_in_flight_at_sigterm_completes(node: Node) -> None:
    assert node.process is not None
    port = node.config.port
    value = os.urandom(2 * 1024 * 1024)
    half = len(value) // 2
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.sendall(
            f"PUT /v0/entity?id=in-flight HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Length: {len(value)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        stream = sock.makefile("rb")
        # "100 Continue" comes from the node once it has routed the request: from now on it is in flight
        assert stream.readline().startswith(b"HTTP/1.1 100")
        assert stream.readline() == b"\r\n"
        sock.sendall(value[:half])
        node.process.send_signal(signal.SIGTERM)
        # the node stops accepting: once new connections are refused, it is shutting down
        wait_for(lambda: refuses_connections(port), DEADLINE, "the node to stop listening after SIGTERM")
        assert node.process.poll() is None, "the node exited with a request in flight"
        sock.sendall(value[half:])
        status_line = stream.readline()
        assert status_line, "the node closed the connection of a request in flight without answering"
        assert status_line.split()[1] == b"201", status_line
    assert node.process.wait(DEADLINE) == 0
    node.start()
    response = node.get("in-flight")
    assert response.status == 200
    assert response.body == value


def test_response_in_flight_at_sigterm_completes(node: Node) -> None:
    assert node.process is not None
    port = node.config.port
    value = b"v" * 4096
    for number in range(2000):  # ~8 MiB of response, far more than the socket buffers hold
        assert node.put(f"key-{number:04d}", value).status == 201
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.settimeout(DEADLINE)
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET /v0/entities?start=key- HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        stream = sock.makefile("rb")
        assert stream.readline().split()[1] == b"200"
        while stream.readline() != b"\r\n":
            pass
        first = int(stream.readline(), 16)
        assert stream.read(first + 2) == b"key-0000\n" + value + b"\r\n"
        node.process.send_signal(signal.SIGTERM)
        wait_for(lambda: refuses_connections(port), DEADLINE, "the node to stop listening after SIGTERM")
        received = 1
        while (size := int(stream.readline(), 16)) > 0:
            assert stream.read(size + 2) == b"key-%04d\n" % received + value + b"\r\n"
            received += 1
        assert received == 2000
    assert node.process.wait(DEADLINE) == 0


def test_port_in_use_exits_2_with_one_line(node: Node, tmp_path: Path) -> None:
    args = ["node", "--port", str(node.config.port), "--data-dir", str(tmp_path / "other")]
    assert_exit_2_with_one_line(run_kvnode(args, tmp_path))
    assert not (tmp_path / "other").exists()  # the failed start removed the data dir it made
    assert node.put("k", b"still fine").status == 201


def test_a_data_dir_of_a_newer_format_exits_2_naming_both_formats(tmp_path: Path) -> None:
    data = tmp_path / "from-a-newer-kvnode"
    data.mkdir()
    db = plyvel.DB(str(data / "system"), create_if_missing=True)
    db.put(FORMAT_PREFIX + b"version", str(DATA_FORMAT + 1).encode())
    db.close()
    args = ["node", "--port", str(free_ports(1)[0]), "--data-dir", str(data)]
    line = assert_exit_2_with_one_line(run_kvnode(args, tmp_path))
    assert f"format {DATA_FORMAT + 1}, newer than format {DATA_FORMAT}" in line
    assert not (data / "records").exists()  # refused before the keyspace was opened
