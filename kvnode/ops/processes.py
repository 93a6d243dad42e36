"""Local server processes, by PID: a kvnode node (or one of the load tools' helper servers) started,
waited for until it serves, and stopped with SIGTERM, then SIGKILL.

>>> node = NodeProcess(NodeConfig(port=8080, data_dir=tmp))  # doctest: +SKIP
>>> node.start()  # serves as itself, or stopped + NodeStartError          # doctest: +SKIP
>>> node.stop()   # SIGTERM, then SIGKILL after a deadline                  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import signal
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from kvnode.access.tls import client_context
from kvnode.config import NodeConfig
from kvnode.ops.flags import node_argv, node_env
from kvnode.ops.output_relay import OutputRelay

__all__ = [
    "Child",
    "NodeProcess",
    "NodeStartError",
    "ServerProcess",
    "cpu_seconds",
    "die_with_parent",
    "start_together",
    "stop_processes",
    "stop_together",
]

READY_TIMEOUT = 30.0  # seconds for a server to answer /v0/status
STOP_TIMEOUT = 15.0  # seconds between SIGTERM and SIGKILL
_POLL_INTERVAL = 0.05
_PROBE_TIMEOUT = 1.0


def die_with_parent() -> None:
    """Runs in the child before exec (``preexec_fn``): SIGTERM it if the launcher dies, so no child is
    orphaned."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc/PID/stat (0 where it cannot be read): the
    benchmark and the profiler put server CPU per request next to their figures with it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class Child(Protocol):
    """What this module uses of a started process: ``subprocess.Popen`` has it, and so does the child of
    a fork server that a subclass of ServerProcess launches it with (``_launch``)."""

    pid: int
    returncode: int | None
    stdout: IO[bytes] | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


class NodeStartError(RuntimeError):
    """A server process did not come up. ``reason`` is one line: the process's own last line when it
    exited (a node says why it cannot start), else what was seen."""

    def __init__(self, url: str, reason: str, log_path: Path | None = None) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.log_path = log_path  # the server's output, if it went to a file

    @property
    def port_taken(self) -> bool:
        """It could not bind its port (EADDRINUSE): another process had taken the port first."""
        return "address already in use" in self.reason.lower()


class ServerProcess:
    """One local server process, by PID. It is ready once ``URL/v0/status`` answers 200 (for a kvnode
    node, naming this very process: see NodeProcess). Stopped with SIGTERM, then SIGKILL.

    Its output is appended to ``log_path`` or, without one, passed to this process's stderr once it
    is ready. With ``new_session``, a Ctrl-C in the terminal does not reach it (the profiler stops
    its children in its own order). Either way it gets SIGTERM if this process dies.
    """

    identified = False  # whether /v0/status must name this process (its url and pid)

    def __init__(
        self, argv: Sequence[str], url: str, log_path: Path | None = None, *, new_session: bool = False
    ) -> None:
        self.argv = list(argv)
        self.url = url
        self.log_path = log_path
        self.new_session = new_session
        self.extra_env: dict[str, str] = {}  # added to this process's environment for the child
        self.ssl_context: ssl.SSLContext | None = None  # how to reach an https:// URL
        self.process: Child | None = None
        self._relay: OutputRelay | None = None
        self._log_start = 0  # where this run's output begins in log_path

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.url} was never started"
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self) -> None:
        """Start the process; start() also waits until it serves."""
        if self.log_path is None:
            self.process = self._launch(subprocess.PIPE)
            assert self.process.stdout is not None
            self._relay = OutputRelay(self.process.stdout)
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            self.process = self._launch(log)

    def _launch(self, stdout: int | IO[bytes]) -> Child:
        """Start ``argv`` with its output to ``stdout`` (a file, or PIPE), stdin from /dev/null."""
        return subprocess.Popen(
            self.argv,
            env={**os.environ, **self.extra_env},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=self.new_session,
            preexec_fn=die_with_parent,
        )

    def start(self, timeout: float = READY_TIMEOUT) -> None:
        """Start the process and wait until it serves; if it does not, stop it and raise NodeStartError."""
        start_together([self], timeout)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (after SIGCONT, should it be frozen), SIGKILL after ``timeout``; the exit status."""
        if self.process is None:
            return None
        stop_together([self], timeout)
        return self.process.returncode

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def freeze(self) -> None:
        """SIGSTOP: the process holds its connections but answers nothing until resume()."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            os.kill(self.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Stop the process if it runs, then start it again with the same command line (same port and
        data dir for a node)."""
        if self.running:
            self.stop()
        self.start()

    def serves(self) -> bool:
        """``/v0/status`` answers 200 (and, for an identified server, names this process)."""
        return self.status() is not None

    def status(self) -> dict[str, Any] | None:
        """``/v0/status``'s answer when it is 200 (for an identified server, one naming this process)."""
        parts = urllib.parse.urlsplit(self.url)
        connection = (
            http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=_PROBE_TIMEOUT, context=self.ssl_context
            )
            if parts.scheme == "https"
            else http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=_PROBE_TIMEOUT)
        )
        try:
            connection.request("GET", "/v0/status")
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            connection.close()
        if response.status != 200:
            return None
        if not self.identified:
            return {}
        try:
            status = json.loads(body)
        except ValueError:
            return None
        if isinstance(status, dict) and status.get("url") == self.url and status.get("pid") == self.pid:
            return status
        return None

    def last_line(self) -> str:
        """The last non-empty line this run of the process wrote ("" if none)."""
        if self._relay is not None:
            if not self.running:
                self._relay.drain()
            return self._relay.last_line
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(max(self._log_start, log.seek(0, os.SEEK_END) - 4096))
            lines = log.read().decode(errors="replace").splitlines()
        return next((line.strip() for line in reversed(lines) if line.strip()), "")

    def release_output(self) -> None:
        if self._relay is not None:
            self._relay.release()

    def exit_error(self) -> NodeStartError:
        """Why the exited process did not start: its own last line, or its exit status."""
        assert self.process is not None
        status = self.process.returncode
        reason = self.last_line() or f"kvnode: {self.url} exited with status {status}"
        return NodeStartError(self.url, reason, self.log_path)


class NodeProcess(ServerProcess):
    """A kvnode node run from its config (``argv`` replaces ``node_argv(config)``: the profiler runs
    nodes under memray). It is ready once its ``/v0/status`` names this process, so a node that does
    not own its port (another process answers there) never counts as ready."""

    identified = True

    def __init__(
        self,
        config: NodeConfig,
        log_path: Path | None = None,
        *,
        argv: Sequence[str] | None = None,
        new_session: bool = False,
    ) -> None:
        super().__init__(argv or node_argv(config), config.url, log_path, new_session=new_session)
        self.extra_env = node_env(config)  # the cluster secret travels in the environment, never argv
        self.ssl_context = client_context(config)  # the node's own certificate, for --tls-client-auth
        self.config = config

    def data_known(self) -> bool:
        """Whether the node knows if its data is whole (serving) or not (rebuilding): a node with a new
        data dir is unknown until a peer has told it whether the cluster knew its URL as another node."""
        status = self.status()
        return status is not None and status.get("data") != "unknown"


def start_together(
    servers: Sequence[ServerProcess], timeout: float = READY_TIMEOUT, cancel: threading.Event | None = None
) -> None:
    """Start every server, then wait until each serves. If one exits first or the deadline passes, stop
    them all and raise NodeStartError for the first found. Returns early once ``cancel`` is set (the
    caller stops them)."""
    try:
        for server in servers:
            server.spawn()
        _wait_ready(servers, time.monotonic() + timeout, cancel or threading.Event())
    except BaseException:
        stop_together(servers)
        raise


def _wait_ready(servers: Sequence[ServerProcess], deadline: float, cancel: threading.Event) -> None:
    waiting = list(servers)
    while not cancel.is_set():
        # Every process, ready or not: a helper can answer for a moment and then die (a proxy whose
        # port was taken lets the other owner of that port answer).
        exited = next((server for server in servers if not server.running), None)
        if exited is not None:
            raise exited.exit_error()
        waiting = [server for server in waiting if not server.serves()]
        if not waiting:
            for server in servers:
                server.release_output()
            return
        if time.monotonic() > deadline:
            late = waiting[0]
            said = late.last_line()
            last = f"; its last line: {said}" if said else ""
            raise NodeStartError(late.url, f"kvnode: {late.url} did not serve in time{last}", late.log_path)
        cancel.wait(_POLL_INTERVAL)


def stop_together(servers: Sequence[ServerProcess], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM every server still running (SIGCONT first if frozen), SIGKILL those left after
    ``timeout``."""
    for server in servers:
        server.resume()
    stop_processes([server.process for server in servers if server.process is not None], timeout)


def stop_processes(processes: Sequence[Child], timeout: float = STOP_TIMEOUT) -> None:
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
