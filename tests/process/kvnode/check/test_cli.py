"""``python -m kvnode check``'s command line: its defaults, ``--nemesis all``, the command that runs a check
again with its seed, flags that go with the other mode refused in one line (exit 2, through
``python -m kvnode`` as a user runs it), and a cluster that cannot be reached: exit 2."""

from __future__ import annotations

import pytest

from tests.harness import REPO, assert_exit_2_with_one_line, run_kvnode


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--local", "--cluster", "http://a:1"], "not allowed with argument"),
        (["--cluster", "http://a:1", "--nodes", "5"], "--nodes and --replication-factor go with --local"),
        (["--local", "--tls-ca", "ca.pem"], "--token-file and --tls-ca go with --cluster"),
        (
            ["--local", "--nodes", "2", "--replication-factor", "3"],
            "--replication-factor 3 exceeds the 2 nodes",
        ),
        (
            ["--local", "--nemesis", "kill,flood"],
            "choose from kill,pause,partition,clock,membership,disk, all or none",
        ),
        (["--local", "--workload", "bank"], "choose from set,register,cas"),
        (["--time", "5"], "one of the arguments --local --cluster is required"),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    stderr = assert_exit_2_with_one_line(run_kvnode(["check", *args], REPO))
    assert stderr.startswith("python -m kvnode check: error: ") and said in stderr, stderr
