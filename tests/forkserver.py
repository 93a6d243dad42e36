"""Node processes forked from a warm one. The suite starts about 900 nodes, and each ``python -m kvnode``
spent most of its CPU (0.4 s of 0.5) importing aiohttp and the node's modules before it did anything: on
a 2-core machine, a third of the suite's time. The fork server, one per pytest process, imports them
once, then forks a child for each node that runs ``python -m kvnode ARGS`` as the command line does
(``runpy``, with the node's own argv, environment, working directory and output, stdin from /dev/null,
SIGTERM when its parent dies), so the tests still run real, separate node processes over real sockets.

The server is its children's parent: it reaps each one and writes its exit status into a pipe whose
other end the test process holds, so that :class:`ForkedChild` reads as a ``subprocess.Popen``:
``poll``, ``wait``, ``returncode`` (negative: the signal that ended it), ``send_signal``, ``kill``.
The server exits once the test process closes its end of the control socket (or dies), and its
children get SIGTERM then. Run as ``python -m tests.forkserver FD`` by :func:`spawn`, never by hand.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from kvnode import hot_path
from kvnode.ops.processes import die_with_parent

__all__ = ["ForkedChild", "forks", "spawn"]

_ROOT = Path(__file__).resolve().parent.parent
_MODULE = "kvnode"
_MAX_REQUEST = 1 << 20  # bytes of one request: argv and environment
# What every node imports before it serves: its command line, the server and client, LevelDB, the loop.
_WARM = ("kvnode.ops.cli", "kvnode.node.serving")


class ForkedChild:
    """A node forked by the fork server, by PID; its exit status arrives on ``exit_pipe``."""

    stdout: IO[bytes] | None = None  # its output goes to a file

    def __init__(self, args: Sequence[str], pid: int, exit_pipe: int) -> None:
        self.args = list(args)
        self.pid = pid
        self.returncode: int | None = None
        self._exit_pipe = exit_pipe
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._reap(0.0)

    def wait(self, timeout: float | None = None) -> int:
        status = self._reap(timeout)
        if status is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return status

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _reap(self, timeout: float | None) -> int | None:
        # The pipe stays open until this object goes: a second waiter's select must not meet a closed
        # (or reused) descriptor. After the status it reads as end of file, so select returns at once.
        if self.returncode is None and select.select([self._exit_pipe], [], [], timeout)[0]:
            with self._lock:
                if self.returncode is None:
                    status = os.read(self._exit_pipe, 16)
                    if not status:
                        raise ChildProcessError(f"the fork server went away before {self.pid} exited")
                    self.returncode = int(status)
        return self.returncode

    def __del__(self) -> None:
        os.close(self._exit_pipe)


class _Client:
    """This process's end of its fork server: started at the first spawn, one request at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._server: subprocess.Popen[bytes] | None = None

    def spawn(
        self, args: Sequence[str], env: Mapping[str, str], output: int, new_session: bool
    ) -> ForkedChild:
        request = {"args": list(args), "env": dict(env), "cwd": os.getcwd(), "new_session": new_session}
        with self._lock:
            control = self._control or self._start()
            socket.send_fds(control, [json.dumps(request).encode()], [output])
            reply, fds, _, _ = socket.recv_fds(control, 1024, 1)
        if not reply or not fds:
            raise ChildProcessError("the fork server went away: see its traceback above")
        return ForkedChild([sys.executable, "-m", _MODULE, *args], json.loads(reply)["pid"], fds[0])

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._server = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver", str(theirs.fileno())],
            cwd=_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # a node's stdout is a file too: block-buffered, as in a fresh one
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        self._control = ours
        atexit.register(self.close)
        return ours

    def close(self) -> None:
        """Close the control socket: the server exits (its children, should any be left, get SIGTERM)."""
        with self._lock:
            if self._control is not None:
                self._control.close()
                self._control = None
            if self._server is not None:
                self._server.wait()
                self._server = None


_client = _Client()


def forks(argv: Sequence[str]) -> bool:
    """Whether the fork server can run ``argv``: ``python -m kvnode ...`` with this Python, not wrapped
    in another command."""
    return list(argv[:3]) == [sys.executable, "-m", _MODULE]


def spawn(argv: Sequence[str], env: Mapping[str, str], output: int, *, new_session: bool) -> ForkedChild:
    """Fork ``argv`` (one that :func:`forks`) with ``env``, output to the descriptor ``output`` (stdout
    and stderr), in a session of its own with ``new_session``."""
    if not forks(argv):
        raise ValueError(f"the fork server runs python -m {_MODULE} only, not {argv[:3]}")
    return _client.spawn(argv[3:], env, output, new_session)


# --- the server ---------------------------------------------------------------------------------------


def _serve(control: socket.socket) -> dict[str, object] | None:
    """Fork a child for each request until the control socket closes (then None). Returns, in each
    child, its request: the caller runs it."""
    exits: dict[int, int] = {}  # a live child's PID: the write end of its exit pipe
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so that SIGCHLD wakes select
    while True:
        ready = select.select([control.fileno(), wake_read], [], [])[0]
        if wake_read in ready:
            os.read(wake_read, 4096)
            _reap(exits)
        if control.fileno() not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, _MAX_REQUEST, 1)
        if not message:
            return None
        exit_read, exit_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (control.detach(), wake_read, wake_write, exit_read, exit_write, *exits.values()):
                os.close(fd)
            request: dict[str, object] = json.loads(message)
            _become(request, fds[0])
            return request
        exits[pid] = exit_write
        socket.send_fds(control, [json.dumps({"pid": pid}).encode()], [exit_read])
        for fd in (exit_read, *fds):
            os.close(fd)


def _reap(exits: dict[int, int]) -> None:
    while exits:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        exit_write = exits.pop(pid)
        os.write(exit_write, str(os.waitstatus_to_exitcode(status)).encode())
        os.close(exit_write)


def _become(request: Mapping[str, object], output: int) -> None:
    """In the child: what Popen sets up for ``python -m kvnode`` (kvnode.ops.processes.ServerProcess)."""
    parent = os.getppid()
    if request["new_session"]:
        os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(devnull)
    os.close(output)
    die_with_parent()
    if os.getppid() != parent:  # the server died before the line above: nobody would reap this node
        os._exit(1)
    os.chdir(str(request["cwd"]))
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    hot_path.activate()  # as python -m kvnode chooses: compiled where these sources are built
    for module in _WARM:
        importlib.import_module(module)

    request = _serve(control)
    if request is None:
        return
    args = request["args"]
    assert isinstance(args, list)
    sys.argv = [sys.argv[0], *args]
    runpy.run_module(_MODULE, run_name="__main__", alter_sys=True)  # its SystemExit ends the process


if __name__ == "__main__":
    main()
