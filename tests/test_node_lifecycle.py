"""A node process's life: restarts keep data, signals stop it cleanly, the command line and the local
cluster launcher. Real processes on loopback, ended by PID."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvnode.local_cluster import free_ports
from tests.harness import Node, read_chunks, request

DEADLINE = 30.0  # generous: other test runs share this machine


def poll(condition_name: str, check: object, timeout: float = DEADLINE) -> None:
    """Call check() until it returns true; fail naming the condition after timeout seconds."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for: {condition_name}")
        time.sleep(0.02)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any KVNODE_* variable, plus extra."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KVNODE_")}
    env.update(extra)
    return env


def kvnode(
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


def test_restart_after_sigkill_keeps_acknowledged_writes(node: Node) -> None:
    values = {f"key-{number:03d}": os.urandom(number * 10) for number in range(200)}
    for key, value in values.items():
        assert node.put(key, value).status == 201
    assert node.delete("key-100").status == 202
    assert node.put("key-101", b"overwritten").status == 201
    node.kill()
    assert node.process is not None and node.process.returncode == -signal.SIGKILL
    node.start()
    values.pop("key-100")
    values["key-101"] = b"overwritten"
    for key, value in values.items():
        response = node.get(key)
        assert (response.status, response.body) == (200, value), key
    assert node.get("key-100").status == 404
    assert node.scan("key-") == sorted((key.encode(), value) for key, value in values.items())


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
        poll("the node to stop listening after SIGTERM", lambda: refuses_connections(port))
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
        poll("the node to stop listening after SIGTERM", lambda: refuses_connections(port))
        received = 1
        while (size := int(stream.readline(), 16)) > 0:
            assert stream.read(size + 2) == b"key-%04d\n" % received + value + b"\r\n"
            received += 1
        assert received == 2000
    assert node.process.wait(DEADLINE) == 0


# --- command line -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["node", "--port", "abc", "--data-dir", "d"],
        ["node", "--port", "0", "--data-dir", "d"],
        ["node", "--port", "-5", "--data-dir", "d"],
        ["node", "--port", "65536", "--data-dir", "d"],
        ["node", "--port", "PORT", "--data-dir", "d", "--fanout", "x"],
        ["node", "--port", "PORT", "--data-dir", "d", "--timeout-ms", "0"],
        ["node", "--port", "PORT", "--data-dir", "d", "--timeout-ms", "soon"],
        ["node", "--port", "PORT", "--data-dir", "d", "--max-body-bytes", "0"],
        ["node", "--port", "PORT", "--data-dir", "d", "--no-such-flag"],
        ["node", "--data-dir", "d"],  # no --port
        ["node", "--port", "PORT"],  # no --data-dir
        ["node", "--port", "PORT", "--data-dir", "d", "--cluster", "http://127.0.0.1:1,http://127.0.0.1:2"],
        ["node", "--port", "PORT", "--data-dir", "d", "--cluster", "not-a-url"],
        ["node", "--port", "PORT", "--data-dir", "d", "--cluster", "SELF,SELF"],
        ["cluster", "--nodes", "0"],
        ["cluster", "--nodes", "three"],
        ["cluster", "--port", "65535", "--nodes", "2"],
        ["cluster", "--fanout", "parallel"],
        ["--no-such-flag"],
        ["no-such-command"],
    ],
    ids=lambda args: " ".join(args),
)
def test_bad_flags_exit_2_with_one_line(tmp_path: Path, args: list[str]) -> None:
    port = free_ports(1)[0]
    self_url = f"http://127.0.0.1:{port}"
    argv = [arg.replace("PORT", str(port)).replace("SELF", self_url) for arg in args]
    assert_exit_2_with_one_line(kvnode(argv, tmp_path))
    assert not (tmp_path / "d").exists(), "a rejected command created its data dir"
    assert not (tmp_path / "data").exists(), "a rejected command created its data dir"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KVNODE_PORT", "abc"),
        ("KVNODE_PORT", "0"),
        ("KVNODE_TIMEOUT_MS", "0"),
        ("KVNODE_FANOUT", "x"),
        ("KVNODE_CLUSTER", "not-a-url"),
        ("KVNODE_FSYNC", "maybe"),
    ],
)
def test_bad_environment_variables_exit_2_with_one_line(tmp_path: Path, variable: str, value: str) -> None:
    # no flag for the variable under test: a flag would win over it
    args = ["node", "--data-dir", "d"] + (
        [] if variable == "KVNODE_PORT" else ["--port", str(free_ports(1)[0])]
    )
    result = kvnode(args, tmp_path, clean_env(**{variable: value}))
    stderr = assert_exit_2_with_one_line(result)
    assert variable in stderr, stderr


def test_a_misspelled_variable_is_named_in_a_warning_with_the_closest_known_one(tmp_path: Path) -> None:
    result = kvnode(["node", "--help"], tmp_path, clean_env(KVNODE_PROT="8081"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "kvnode: warning: KVNODE_PROT is not a kvnode variable and is ignored (did you mean KVNODE_PORT?)\n"
    )
    # A flag error still ends the command; the warning says what was probably meant.
    result = kvnode(["node", "--data-dir", "d"], tmp_path, clean_env(KVNODE_PROT="8081"))
    assert result.returncode == 2
    warning, error = result.stderr.splitlines()
    assert "KVNODE_PROT" in warning and "KVNODE_PORT" in warning
    assert "--port" in error


def test_unusable_data_dir_exits_2_with_one_line(tmp_path: Path) -> None:
    regular_file = tmp_path / "a-file"
    regular_file.write_text("not a directory\n")
    for data_dir in (regular_file, regular_file / "below"):
        port = free_ports(1)[0]
        stderr = assert_exit_2_with_one_line(
            kvnode(["node", "--port", str(port), "--data-dir", str(data_dir)], tmp_path)
        )
        assert str(regular_file) in stderr
        assert "is not a directory" in stderr and "File exists" not in stderr, stderr
        assert refuses_connections(port)
    assert regular_file.read_text() == "not a directory\n"


def test_cluster_with_a_data_dir_that_is_a_file_says_so_once_and_exits_2(tmp_path: Path) -> None:
    regular_file = tmp_path / "a-file"
    regular_file.write_text("not a directory\n")
    base = consecutive_free_ports(3)
    args = ["cluster", "--port", str(base), "--data-dir", str(regular_file)]
    stderr = assert_exit_2_with_one_line(kvnode(args, tmp_path))
    assert str(regular_file) in stderr and "is not a directory" in stderr, stderr
    # One node's own data dir is a file: that node's line, once, and no node left running.
    data = tmp_path / "data"
    data.mkdir()
    (data / f"node-{base + 1}").write_text("in the way\n")
    launcher = run_launcher(["--port", str(base), "--data-dir", str(data)], tmp_path)
    stderr = assert_exit_2_with_one_line(launcher.result)
    assert f"node-{base + 1}" in stderr and "is not a directory" in stderr, stderr
    assert_no_node_left(launcher, data)


def test_data_dir_in_use_by_a_running_node_exits_2_with_one_line(node: Node, tmp_path: Path) -> None:
    port = free_ports(1)[0]
    args = ["node", "--port", str(port), "--data-dir", str(node.config.data_dir)]
    stderr = assert_exit_2_with_one_line(kvnode(args, tmp_path))
    assert str(node.config.data_dir) in stderr
    assert node.put("k", b"still fine").status == 201  # the running node is unharmed


def test_port_in_use_exits_2_with_one_line(node: Node, tmp_path: Path) -> None:
    args = ["node", "--port", str(node.config.port), "--data-dir", str(tmp_path / "other")]
    assert_exit_2_with_one_line(kvnode(args, tmp_path))
    assert node.put("k", b"still fine").status == 201


def test_environment_variables_configure_a_node(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    env = clean_env(
        KVNODE_PORT=str(port), KVNODE_DATA_DIR=str(tmp_path / "env-data"), KVNODE_MAX_BODY_BYTES="10"
    )
    with started(["node"], tmp_path, env, tmp_path / "node.log") as process:
        poll("the node to serve on KVNODE_PORT", lambda: serves(port) or process.poll() is not None)
        assert process.poll() is None, (tmp_path / "node.log").read_text()
        url = f"http://127.0.0.1:{port}"
        assert request(url, "PUT", "/v0/entity?id=k", body=b"0123456789").status == 201
        assert (
            request(url, "PUT", "/v0/entity?id=k", body=b"0123456789a").status == 413
        )  # KVNODE_MAX_BODY_BYTES
        assert (tmp_path / "env-data" / "records" / "CURRENT").is_file()  # LevelDB in KVNODE_DATA_DIR
        process.send_signal(signal.SIGTERM)
        assert process.wait(DEADLINE) == 0


def test_flags_win_over_environment_variables(tmp_path: Path) -> None:
    env_port, flag_port = free_ports(2)
    env = clean_env(KVNODE_PORT=str(env_port), KVNODE_DATA_DIR=str(tmp_path / "env-data"))
    args = ["node", "--port", str(flag_port), "--data-dir", str(tmp_path / "flag-data")]
    with started(args, tmp_path, env, tmp_path / "node.log") as process:
        poll("the node to serve on --port", lambda: serves(flag_port) or process.poll() is not None)
        assert process.poll() is None, (tmp_path / "node.log").read_text()
        assert refuses_connections(env_port)
        assert (tmp_path / "flag-data" / "records" / "CURRENT").is_file()
        assert not (tmp_path / "env-data").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(DEADLINE) == 0


NODE_FLAGS = ["--port", "--data-dir", "--host", "--cluster", "--fanout", "--timeout-ms", "--max-body-bytes"]
CLUSTER_FLAGS = ["--nodes", "--port", "--data-dir", "--host", "--fanout", "--timeout-ms", "--max-body-bytes"]


def test_help_mentions_every_flag(tmp_path: Path) -> None:
    for command, flags in (("node", NODE_FLAGS), ("cluster", CLUSTER_FLAGS)):
        result = kvnode([command, "--help"], tmp_path)
        assert result.returncode == 0, result.stderr
        assert "(default: )" not in result.stdout, command
        for flag in flags:
            assert flag in result.stdout, (command, flag)
            env = "KVNODE_" + flag.removeprefix("--").replace("-", "_").upper()
            assert env in result.stdout, (command, env)
    result = kvnode(["--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "cluster" in result.stdout and "node" in result.stdout


# --- the local cluster launcher -----------------------------------------------------------------------


def consecutive_free_ports(count: int) -> int:
    """The first of count consecutive ports that are free right now."""
    for _ in range(100):
        base = free_ports(1)[0]
        if base + count > 65536:
            continue
        sockets: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError(f"found no {count} consecutive free ports")


def children(pid: int) -> list[int]:
    """PIDs of the live processes whose parent is pid (from /proc/*/stat)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def is_running(pid: int) -> bool:
    """True while pid is a process that has not exited (a zombie has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def read_lines(stream: Iterator[bytes], into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line.decode())
    into.put(None)


NODE_LINE = re.compile(r"^  (http://[\w.]+:\d+)  pid (\d+)$")


@contextlib.contextmanager
def launched_cluster(
    tmp_path: Path, nodes: int, env: Mapping[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], list[str], list[int]]]:
    """``python -m kvnode cluster``, up and serving: (launcher, URLs it printed, node PIDs it printed).
    Its stderr goes to tmp_path/cluster.log."""
    base = consecutive_free_ports(nodes)
    args = ["cluster", "--nodes", str(nodes), "--port", str(base), "--data-dir", str(tmp_path / "data")]
    log = tmp_path / "cluster.log"
    with open(log, "ab") as err:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "kvnode", *args],
            cwd=tmp_path,
            env=dict(env) if env is not None else clean_env(),
            stdout=subprocess.PIPE,
            stderr=err,
        )
    assert launcher.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=read_lines, args=(launcher.stdout, lines), daemon=True).start()
    node_pids: list[int] = []
    try:
        urls: list[str] = []
        deadline = time.monotonic() + DEADLINE
        while len(urls) < nodes:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"the launcher ended its output early:\n{log.read_text()[-3000:]}"
            if match := NODE_LINE.match(line.rstrip("\n")):
                urls.append(match[1])
                node_pids.append(int(match[2]))
        assert sorted(node_pids) == sorted(children(launcher.pid)), "the PIDs printed are not its nodes"
        yield launcher, urls, node_pids
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            try:
                launcher.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
        for pid in node_pids:  # only the launcher's own children, by PID, should any be left
            if is_running(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_cluster_command_starts_serves_and_stops_on_sigint(tmp_path: Path) -> None:
    with launched_cluster(tmp_path, 3) as (launcher, urls, node_pids):
        base = int(urls[0].rpartition(":")[2])
        assert urls == [f"http://127.0.0.1:{port}" for port in range(base, base + 3)]
        assert len(node_pids) == 3, node_pids
        for url, pid in zip(urls, node_pids, strict=True):
            response = request(url, "GET", "/v0/status")
            assert response.status == 200
            assert json.loads(response.body) == {"url": url, "pid": pid, "cluster": urls}
        assert request(urls[0], "PUT", "/v0/entity?id=k", body=b"cluster value").status == 201
        for url in urls:  # from = 3, ack = 2 by default: every node reads it back
            assert request(url, "GET", "/v0/entity?id=k").body == b"cluster value"
        for port in range(base, base + 3):
            assert (tmp_path / "data" / f"node-{port}" / "records" / "CURRENT").is_file()

        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(DEADLINE) == 0
        poll("every node process to exit", lambda: not any(is_running(pid) for pid in node_pids))
        for port in range(base, base + 3):
            assert refuses_connections(port)


def test_cluster_nodes_do_not_outlive_a_killed_launcher(tmp_path: Path) -> None:
    with launched_cluster(tmp_path, 2) as (launcher, urls, node_pids):
        assert len(node_pids) == 2
        assert all(request(url, "GET", "/v0/status").status == 200 for url in urls)
        launcher.kill()
        launcher.wait()
        poll("the orphaned nodes to exit", lambda: not any(is_running(pid) for pid in node_pids))


def test_cluster_started_with_a_misspelled_variable_warns_once(tmp_path: Path) -> None:
    with launched_cluster(tmp_path, 2, clean_env(KVNODE_FANOTU="sync")) as (launcher, urls, _):
        assert all(request(url, "GET", "/v0/status").status == 200 for url in urls)
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(DEADLINE) == 0
    warnings = [
        line for line in (tmp_path / "cluster.log").read_text().splitlines() if "KVNODE_FANOTU" in line
    ]
    assert len(warnings) == 1 and "KVNODE_FANOUT" in warnings[0], warnings


@dataclass
class LauncherRun:
    result: subprocess.CompletedProcess[str]
    node_pids: set[int]  # every child PID seen while it ran


def run_launcher(args: Sequence[str], cwd: Path) -> LauncherRun:
    """``python -m kvnode cluster ARGS`` run until it exits on its own; its children's PIDs are noted."""
    out, err = cwd / "launcher.out", cwd / "launcher.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "kvnode", "cluster", *args],
            cwd=cwd,
            env=clean_env(),
            stdout=stdout,
            stderr=stderr,
        )
    seen: set[int] = set()
    deadline = time.monotonic() + DEADLINE
    try:
        while launcher.poll() is None:
            assert time.monotonic() < deadline, "the launcher did not exit"
            seen.update(children(launcher.pid))
            time.sleep(0.005)  # a sampling interval: node processes live for a second or more
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    result = subprocess.CompletedProcess(launcher.args, launcher.returncode, out.read_text(), err.read_text())
    return LauncherRun(result, seen)


def processes_naming(path: Path) -> list[int]:
    """PIDs of live processes whose command line mentions path."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and is_running(int(entry.name)):
            with contextlib.suppress(OSError):
                if str(path).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def assert_no_node_left(launcher: LauncherRun, data_dir: Path, others: Sequence[int] = ()) -> None:
    """No process the launcher started is left, and of the processes naming data_dir only others run."""
    assert launcher.node_pids, "no node process was seen: the check below would prove nothing"
    assert not [pid for pid in launcher.node_pids if is_running(pid)], "a node outlived its launcher"
    assert sorted(processes_naming(data_dir)) == sorted(others), "a node with that data dir is left"
    assert "ready" not in launcher.result.stdout


def test_cluster_refuses_a_port_held_by_another_node_and_leaves_it_alone(node: Node, tmp_path: Path) -> None:
    data = tmp_path / "launcher-data"
    launcher = run_launcher(["--port", str(node.config.port), "--data-dir", str(data)], tmp_path)
    stderr = assert_exit_2_with_one_line(launcher.result)
    assert "cannot listen on" in stderr and "address already in use" in stderr.lower(), stderr
    assert_no_node_left(launcher, data)
    assert node.running and node.scan("\x00") == [], "the launcher touched a node it does not own"
    assert node.put("k", b"still fine").status == 201


def test_cluster_refuses_data_dirs_locked_by_a_running_cluster(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.mkdir()
    with launched_cluster(first, 2) as (running, urls, node_pids):
        base = int(urls[0].rpartition(":")[2])
        second = tmp_path / "second"
        second.mkdir()
        # Same ports and data dirs, as a second `make run` has: the data dirs are locked first.
        launcher = run_launcher(
            ["--nodes", "2", "--port", str(base), "--data-dir", str(first / "data")], second
        )
        stderr = assert_exit_2_with_one_line(launcher.result)
        assert "cannot open data dir" in stderr and str(first / "data") in stderr, stderr
        assert_no_node_left(launcher, first / "data", others=[running.pid, *node_pids])
        for url, pid in zip(urls, node_pids, strict=True):  # the running cluster is untouched
            assert json.loads(request(url, "GET", "/v0/status").body)["pid"] == pid
            status, chunks = read_chunks(url, "/v0/entities", {"start": "\x00"})
            assert (status, chunks) == (200, [])
