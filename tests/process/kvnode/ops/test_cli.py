"""kvnode.ops.cli: each command handed over (a node, a local cluster, the admin tool, which starts without
the server), and a node refused with one line when another process holds its data dir."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvnode.ops.ports import free_ports
from tests.harness import DEADLINE, Node, assert_exit_2_with_one_line, clean_env, run_kvnode


@pytest.fixture(autouse=True)
def no_kvnode_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KVNODE_* variable of the caller's would configure the commands run in this process."""
    for name in os.environ.keys() - clean_env().keys():
        monkeypatch.delenv(name)


def test_admin_starts_without_loading_the_server() -> None:
    probe = (
        "import sys; from kvnode.ops import cli\n"
        "try:\n    cli.main(['admin', '--help'])\nexcept SystemExit as exited:\n    code = exited.code\n"
        "print(code, 'kvnode.node.serving' in sys.modules, 'kvnode.ops.local_cluster' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=DEADLINE, env=clean_env()
    )
    assert done.returncode == 0, done.stderr
    assert "python -m kvnode admin" in done.stdout
    assert done.stdout.splitlines()[-1] == "0 False False"


def test_a_node_on_a_data_dir_in_use_exits_2_naming_the_holder(node: Node, tmp_path: Path) -> None:
    port = free_ports(1)[0]
    args = ["node", "--port", str(port), "--data-dir", str(node.config.data_dir)]
    stderr = assert_exit_2_with_one_line(run_kvnode(args, tmp_path))
    expected = f"kvnode: data dir {node.config.data_dir} is in use by another kvnode process (pid {node.pid})"
    assert stderr == expected + "\n"
    assert node.put("k", b"still fine").status == 201  # the running node is unharmed
