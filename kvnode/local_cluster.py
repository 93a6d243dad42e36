"""A local cluster: several node processes on one machine, started, watched and stopped together."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from kvnode.cli import node_argv, node_env
from kvnode.config import ClusterConfig, NodeConfig

__all__ = [
    "NodeProcesses",
    "die_with_parent",
    "free_ports",
    "run_cluster",
    "stop_processes",
    "wait_until_serving",
]

_READY_TIMEOUT = 30.0
_STOP_TIMEOUT = 15.0


def die_with_parent() -> None:
    """Runs in the child before exec (``preexec_fn``): SIGTERM it if the launcher dies, so no child is
    orphaned. The local cluster, the test harness, the load tester and the profiler all use it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_ports(count: int) -> list[int]:
    """Loopback ports the kernel reports free right now (bound together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_until_serving(
    url: str,
    process: subprocess.Popen[bytes] | None,
    deadline: float,
    cancel: threading.Event | None = None,
) -> bool:
    """Poll ``url/v0/status`` until it answers 200; False if the deadline passes, the process exits or
    ``cancel`` is set."""
    cancel = cancel or threading.Event()
    while time.monotonic() < deadline and not cancel.is_set():
        if process is not None and process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/v0/status", timeout=1.0) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        cancel.wait(0.05)
    return False


class NodeProcesses:
    """Node processes started from configs; stop() ends them by PID, SIGTERM first, then SIGKILL.

    With ``log_dir``, each node's output goes to ``log_dir/node-PORT.log`` instead of this terminal.
    """

    def __init__(self, configs: Sequence[NodeConfig], log_dir: Path | None = None) -> None:
        self.configs = list(configs)
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for config in self.configs:
            env = {**os.environ, **node_env(config)}  # the cluster secret goes in the environment
            if self.log_dir is None:
                process = subprocess.Popen(node_argv(config), env=env, preexec_fn=die_with_parent)
            else:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                with open(self.log_dir / f"node-{config.port}.log", "ab") as log:
                    process = subprocess.Popen(
                        node_argv(config),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        preexec_fn=die_with_parent,
                    )
            self.processes.append(process)

    def wait_ready(self, timeout: float = _READY_TIMEOUT, cancel: threading.Event | None = None) -> list[str]:
        """URLs of the nodes that did not come up in time (empty when all serve)."""
        deadline = time.monotonic() + timeout
        return [
            config.url
            for config, process in zip(self.configs, self.processes, strict=True)
            if not wait_until_serving(config.url, process, deadline, cancel)
        ]

    def stop(self) -> None:
        stop_processes(self.processes)


def stop_processes(processes: Sequence[subprocess.Popen[bytes]], timeout: float = _STOP_TIMEOUT) -> None:
    """SIGTERM each process still running, by its PID; SIGKILL those still there after ``timeout``."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_cluster(config: ClusterConfig) -> int:
    nodes = NodeProcesses(config.node_configs())
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    nodes.start()
    try:
        not_ready = nodes.wait_ready(cancel=stop)
        if stop.is_set():
            return 0
        if not_ready:
            print(f"kvnode: nodes did not start: {', '.join(not_ready)}", file=sys.stderr)
            return 1
        print(f"kvnode cluster of {config.nodes} ready ({config.node.fanout} fan-out):", flush=True)
        for node in nodes.configs:
            print(f"  {node.url}", flush=True)
        print("Ctrl-C stops every node.", flush=True)
        running = dict(zip(nodes.processes, nodes.configs, strict=True))
        while running and not stop.wait(0.5):
            for process, node in list(running.items()):
                if process.poll() is not None:
                    del running[process]
                    print(f"kvnode: node {node.url} exited with status {process.returncode}", file=sys.stderr)
        if not running:
            return 1
        return 0
    finally:
        nodes.stop()
