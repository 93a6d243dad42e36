"""The fork server's children are ``python -m kvnode`` as the command line runs it: the same output and
exit status for the same argv, environment and working directory; and they read as a Popen does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvnode.config import NodeConfig
from kvnode.ops.ports import free_ports
from tests import forkserver
from tests.harness import Node

KVNODE = [sys.executable, "-m", "kvnode"]


def forked(
    argv: list[str], env: dict[str, str], log: Path, new_session: bool = False
) -> forkserver.ForkedChild:
    with open(log, "wb") as output:
        return forkserver.spawn(argv, env, output.fileno(), new_session=new_session)


@pytest.mark.parametrize(
    "args", [["node", "--port", "1", "--bogus"], ["node", "--port", "0"], ["node", "--help"]]
)
def test_a_forked_command_says_and_exits_as_the_command_line_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    env = {**os.environ, "KVNODE_TYPO": "1"}  # a warning that only the environment given can cause
    with open(tmp_path / "ran.log", "wb") as output:
        ran = subprocess.run(
            [*KVNODE, *args], env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=output, stderr=output
        )
    monkeypatch.chdir(tmp_path)  # the child's working directory is the caller's
    child = forked([*KVNODE, *args], env, tmp_path / "forked.log")
    assert child.wait(30) == ran.returncode
    assert (tmp_path / "forked.log").read_text() == (tmp_path / "ran.log").read_text()


def test_a_forked_child_reads_as_a_popen(tmp_path: Path) -> None:
    child = forked(
        [*KVNODE, "node", "--port", str(free_ports(1)[0]), "--data-dir", str(tmp_path)],
        {**os.environ},
        tmp_path / "n.log",
        new_session=True,
    )
    assert child.poll() is None and child.returncode is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(0.1)
    assert os.getsid(child.pid) == child.pid  # new_session: Ctrl-C in the terminal does not reach it
    child.send_signal(signal.SIGSTOP)  # a stopped child has not exited
    assert child.poll() is None
    child.send_signal(signal.SIGCONT)
    child.kill()
    assert child.wait(30) == -signal.SIGKILL and child.poll() == -signal.SIGKILL
    child.kill()  # a no-op once it has exited, as Popen's


def test_a_test_node_is_forked_and_serves_as_itself(tmp_path: Path) -> None:
    node = Node(NodeConfig(port=free_ports(1)[0], data_dir=tmp_path / "data"), tmp_path / "node.log")
    node.start()  # ready only once /v0/status names this very PID
    assert isinstance(node.process, forkserver.ForkedChild)
    assert node.put("k", b"v").status == 201 and node.get("k").body == b"v"
    assert node.stop() == 0
