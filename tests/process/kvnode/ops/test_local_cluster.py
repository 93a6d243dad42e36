"""kvnode.ops.local_cluster: start_local_cluster's options, and the ``cluster`` command (``python -m
kvnode`` without a command): it starts, serves and stops its nodes, refuses a second cluster on its data
dir naming the first, and leaves nothing running when it cannot start. Real processes, ended by PID."""

from __future__ import annotations

import contextlib
import dataclasses
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
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvnode.access.tls import verifying_context
from kvnode.config import NodeConfig
from kvnode.ops.certs import ClusterCertificates
from kvnode.ops.local_cluster import start_local_cluster
from kvnode.ops.ports import free_ports
from kvnode.ops.processes import NodeProcess, ServerProcess
from tests.harness import (
    DEADLINE,
    Node,
    assert_exit_2_with_one_line,
    clean_env,
    needs_openssl,
    read_chunks,
    refuses_connections,
    request,
    run_kvnode,
    started,
    wait_for,
    write_secret_file,
)


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


NODE_LINE = re.compile(r"^  (https?://[\w.]+:\d+)  pid (\d+)$")


@contextlib.contextmanager
def launched_cluster(
    tmp_path: Path,
    nodes: int,
    env: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    base: int = 0,
    stdout: list[str] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], list[str], list[int]]]:
    """``python -m kvnode cluster [OPTIONS]`` (on ports from ``base``, by default free ones), up and
    serving: (launcher, URLs it printed, node PIDs it printed); it may print more nodes than ``nodes`` (a
    membership grown since). Its stderr goes to tmp_path/cluster.log, its stdout lines to ``stdout``."""
    base = base or free_ports(nodes)[0]
    args = ["cluster", "--nodes", str(nodes), "--port", str(base), "--data-dir", str(tmp_path / "data")]
    args += options
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
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"the launcher ended its output early:\n{log.read_text()[-3000:]}"
            if stdout is not None:
                stdout.append(line.rstrip("\n"))
            if match := NODE_LINE.match(line.rstrip("\n")):
                urls.append(match[1])
                node_pids.append(int(match[2]))
            elif urls:  # the line after the last node's
                break
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
            status = json.loads(response.body)
            assert (status["url"], status["pid"], status["cluster"], status["data"]) == (
                url,
                pid,
                urls,
                "serving",
            )
        assert request(urls[0], "PUT", "/v0/entity?id=k", body=b"cluster value").status == 201
        for url in urls:  # from = 3, ack = 2 by default: every node reads it back
            assert request(url, "GET", "/v0/entity?id=k").body == b"cluster value"
        for port in range(base, base + 3):
            assert (tmp_path / "data" / f"node-{port}" / "records" / "CURRENT").is_file()

        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(DEADLINE) == 0
        wait_for(
            lambda: not any(is_running(pid) for pid in node_pids), DEADLINE, "every node process to exit"
        )
        for port in range(base, base + 3):
            assert refuses_connections(port)


@needs_openssl
def test_cluster_with_tls_makes_its_certificates_and_serves_https_only(tmp_path: Path) -> None:
    with launched_cluster(tmp_path, 2, options=["--tls"]) as (launcher, urls, _):
        certificates = ClusterCertificates(tmp_path / "data" / "tls")
        ca = verifying_context(certificates.ca)
        assert all(url.startswith("https://127.0.0.1:") for url in urls), urls
        for url in urls:
            node = certificates.node(f"node-{url.rpartition(':')[2]}")
            assert node.cert.is_file() and node.key.stat().st_mode & 0o777 == 0o600
        quorum: dict[str, str | int] = {"id": "k", "ack": 2}
        assert request(urls[0], "PUT", "/v0/entity", quorum, b"secure", context=ca).status == 201
        assert request(urls[1], "GET", "/v0/entity", quorum, context=ca).body == b"secure"
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(DEADLINE) == 0


def test_cluster_nodes_do_not_outlive_a_killed_launcher(tmp_path: Path) -> None:
    with launched_cluster(tmp_path, 2) as (launcher, urls, node_pids):
        assert len(node_pids) == 2
        assert all(request(url, "GET", "/v0/status").status == 200 for url in urls)
        launcher.kill()
        launcher.wait()
        wait_for(
            lambda: not any(is_running(pid) for pid in node_pids), DEADLINE, "the orphaned nodes to exit"
        )


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
    port = node.config.port
    advice = (
        f"kvnode: cannot listen on {node.url}: Address already in use: another process holds the port; "
        f"the cluster takes 3 consecutive ports from --port {port}: start it on others, e.g. --port "
    )
    assert stderr.startswith(advice) and stderr[len(advice) :].strip().isdigit(), stderr
    assert_no_node_left(launcher, data)
    # A new cluster that could not start leaves nothing: no secret, no node dir holding a membership on
    # these ports (which the next start, on the ports advised, would run instead).
    assert not data.exists()
    assert node.running and node.scan("\x00") == [], "the launcher touched a node it does not own"
    assert node.put("k", b"still fine").status == 201
    # A data dir that held other files keeps them, and only them.
    data.mkdir()
    (data / "notes.txt").write_text("mine\n")
    launcher = run_launcher(["--port", str(port), "--data-dir", str(data)], tmp_path)
    assert_exit_2_with_one_line(launcher.result)
    assert [entry.name for entry in data.iterdir()] == ["notes.txt"]


def test_a_stored_clusters_port_held_by_another_process_is_said_to_keep_its_url(tmp_path: Path) -> None:
    """A stored membership's members keep their URLs: no other --port to advise, and nothing removed."""
    with launched_cluster(tmp_path, 2) as (_, urls, _):
        pass
    data = tmp_path / "data"
    stored = sorted(entry.name for entry in data.iterdir())
    port = urls[0].rpartition(":")[2]
    with socket.create_server(("127.0.0.1", int(port))):
        launcher = run_launcher(["--nodes", "2", "--port", port, "--data-dir", str(data)], tmp_path)
    stderr = assert_exit_2_with_one_line(launcher.result)
    assert stderr == (
        f"kvnode: cannot listen on {urls[0]}: Address already in use: another process holds the port, and "
        f"the members {data} stores keep their URLs: stop that process (or start afresh in another "
        "--data-dir)\n"
    ), stderr
    assert sorted(entry.name for entry in data.iterdir()) == stored


def test_cluster_with_a_data_dir_that_is_a_file_says_so_once_and_exits_2(tmp_path: Path) -> None:
    regular_file = tmp_path / "a-file"
    regular_file.write_text("not a directory\n")
    base = free_ports(3)[0]
    args = ["cluster", "--port", str(base), "--data-dir", str(regular_file)]
    stderr = assert_exit_2_with_one_line(run_kvnode(args, tmp_path))
    assert str(regular_file) in stderr and "is not a directory" in stderr, stderr
    # One node's own data dir is a file: that node's line, once, and no node left running.
    data = tmp_path / "data"
    data.mkdir()
    (data / f"node-{base + 1}").write_text("in the way\n")
    launcher = run_launcher(["--port", str(base), "--data-dir", str(data)], tmp_path)
    stderr = assert_exit_2_with_one_line(launcher.result)
    assert f"node-{base + 1}" in stderr and "is not a directory" in stderr, stderr
    assert_no_node_left(launcher, data)


def test_a_second_cluster_on_a_running_clusters_data_dir_names_it_and_leaves_it_alone(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.mkdir()
    data = first / "data"
    with launched_cluster(first, 2) as (running, urls, node_pids):
        assert (data / "cluster.pid").read_text() == f"{running.pid}\n"
        base = int(urls[0].rpartition(":")[2])
        second = tmp_path / "second"
        second.mkdir()
        # Same ports and data dir, as a second `make run` has.
        launcher = run_launcher(["--nodes", "2", "--port", str(base), "--data-dir", str(data)], second)
        stderr = assert_exit_2_with_one_line(launcher.result)
        assert f"a kvnode cluster is already running on {data} (pid {running.pid})" in stderr, stderr
        assert f"kill {running.pid}" in stderr, stderr
        assert not launcher.node_pids, "the second command started nodes"
        for url, pid in zip(urls, node_pids, strict=True):  # the running cluster is untouched
            assert json.loads(request(url, "GET", "/v0/status").body)["pid"] == pid
            status, chunks = read_chunks(url, "/v0/entities", {"start": "\x00"})
            assert (status, chunks) == (200, [])
    assert not (data / "cluster.pid").exists(), "the pid file outlived its cluster"


def test_a_cluster_on_a_data_dir_a_running_node_holds_names_that_node(node: Node, tmp_path: Path) -> None:
    # No cluster runs there (its pid file is free), but a node has that node's data dir open.
    data = node.config.data_dir.parent
    args = ["--nodes", "1", "--port", str(node.config.port), "--data-dir", str(data)]
    launcher = run_launcher(args, tmp_path)
    stderr = assert_exit_2_with_one_line(launcher.result)
    expected = f"data dir {node.config.data_dir} is in use by another kvnode process (pid {node.pid})"
    assert expected in stderr, stderr
    assert node.put("k", b"still fine").status == 201


def test_the_generated_secret_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    with launched_cluster(tmp_path, 1):
        assert (tmp_path / "data" / "cluster.secret").stat().st_mode & 0o777 == 0o600


def test_a_kept_secret_open_to_others_is_refused_naming_the_fix(tmp_path: Path) -> None:
    secret = write_secret_file(tmp_path / "data" / "cluster.secret", "a secret of more than enough bytes")
    secret.chmod(0o644)
    launcher = run_launcher(["--port", str(free_ports(3)[0]), "--data-dir", "data"], tmp_path)
    stderr = assert_exit_2_with_one_line(launcher.result)
    assert "chmod 600 data/cluster.secret" in stderr, stderr
    assert not launcher.node_pids


# --- start_local_cluster ---------------------------------------------------------------------------------


def test_a_local_cluster_names_data_dirs_and_logs_and_runs_helpers(tmp_path: Path) -> None:
    """Node b listens on a spare port behind a helper on its URL (the slow-replica scenario's shape)."""

    def behind_helper(index: int, config: NodeConfig, spare: list[int]) -> NodeConfig:
        return dataclasses.replace(config, port=spare[0], advertise_url=config.url) if index == 1 else config

    def helper(configs: list[NodeConfig]) -> list[ServerProcess]:
        listen = urllib.parse.urlsplit(configs[1].url).port
        argv = [sys.executable, "-m", "loadtest.delay_proxy", "--listen", f"127.0.0.1:{listen}"]
        argv += ["--target", f"127.0.0.1:{configs[1].port}", "--delay-ms", "0"]
        return [ServerProcess(argv, configs[1].url, tmp_path / "logs" / "proxy.log")]

    cluster = start_local_cluster(
        NodeConfig(data_dir=tmp_path / "data"),
        2,
        NodeProcess,
        names=["a", "b"],
        log_dir=tmp_path / "logs",
        spare_ports=1,
        configure=behind_helper,
        helpers=helper,
    )
    try:
        assert [node.config.data_dir for node in cluster] == [tmp_path / "data" / name for name in "ab"]
        assert [node.log_path for node in cluster] == [tmp_path / "logs" / f"{name}.log" for name in "ab"]
        assert all(node.config.cluster == tuple(cluster.urls) for node in cluster)
        node_b = cluster[1]
        assert node_b.url != f"http://127.0.0.1:{node_b.config.port}"  # reached through the helper
        assert all(node.serves() for node in cluster) and cluster.helpers[0].running
        assert request(cluster.urls[0], "PUT", "/v0/entity", {"id": "k"}, b"v").status == 201
        assert request(node_b.url, "GET", "/v0/entity", {"id": "k"}).body == b"v"
    finally:
        cluster.stop()
    assert not any(server.running for server in [*cluster, *cluster.helpers])


def test_the_cluster_command_runs_a_node_that_joined_when_started_again(tmp_path: Path) -> None:
    """A node added to a running cluster (README: node --join, its data in DATA_DIR/node-PORT) is run by
    the next `cluster` on that data dir with the others, as a member."""
    base = free_ports(4)[0]
    data = tmp_path / "data"
    with launched_cluster(tmp_path, 3, base=base) as (launcher, urls, _):
        added = f"http://127.0.0.1:{base + 3}"
        args = ["node", "--port", str(base + 3), "--data-dir", str(data / f"node-{base + 3}")]
        args += ["--join", urls[0], "--cluster-secret-file", str(data / "cluster.secret")]
        with started(args, tmp_path, clean_env(), tmp_path / "added.log"):
            wait_for(lambda: _settled_member(urls[0], added), DEADLINE, "the added node a member")
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(DEADLINE) == 0
    said: list[str] = []
    with launched_cluster(tmp_path, 3, base=base, stdout=said) as (_, urls, _):
        assert urls == [*(f"http://127.0.0.1:{port}" for port in range(base, base + 3)), added]
        assert f"kvnode: {data} holds a cluster of 4 (membership version 3): running its members" in said
        assert all(_settled_member(url, added) for url in urls)


def _settled_member(url: str, member: str) -> bool:
    status = json.loads(request(url, "GET", "/v0/status").body)
    return member in status["cluster"] and not status["joining"]


def test_machines_on_loopback_keep_every_keys_replicas_on_distinct_machines(tmp_path: Path) -> None:
    """`cluster --machines 2 --per-machine 2`: two machines (127.0.0.1, 127.0.0.2) of two members each,
    serving clients on one shared port per machine. With from=2 each key has a replica on each machine,
    so with one whole machine stopped every key still reads through the other; and the next launcher on
    the data dir runs the same members."""
    base = free_ports(3)[0]
    options = ["--machines", "2", "--per-machine", "2"]
    members = [f"http://127.0.0.{host}:{port}" for host in (1, 2) for port in (base + 1, base + 2)]
    machines = [f"http://127.0.0.{host}:{base}" for host in (1, 2)]
    said: list[str] = []
    with launched_cluster(tmp_path, 1, options=options, base=base, stdout=said) as (_, urls, pids):
        assert urls == members
        assert f"2 machines, a client URL each (shared by its members): {', '.join(machines)}" in said
        quorum: dict[str, str | int] = {"ack": 2, "from": 2}
        for i in range(40):
            assert request(machines[1], "PUT", "/v0/entity", {"id": f"k{i}", **quorum}, b"v").status == 201
        answered = {json.loads(request(machines[0], "GET", "/v0/status").body)["url"] for _ in range(40)}
        assert answered == set(members[:2]), "the shared port spreads connections over the machine's members"
        for pid in pids[2:]:  # the whole second machine stops
            os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(40):
                params: dict[str, str | int] = {"id": f"k{i}", "ack": 1, "from": 2}
                assert request(machines[0], "GET", "/v0/entity", params).body == b"v", f"k{i}"
        finally:
            for pid in pids[2:]:
                os.kill(pid, signal.SIGCONT)
    with launched_cluster(tmp_path, 1, options=options, base=base) as (_, urls, _):
        assert urls == members
        assert request(machines[0], "GET", "/v0/entity", {"id": "k7"}).body == b"v"
