"""``python -m kvnode check``'s command line: its defaults, ``--nemesis all``, the command that runs a check
again with its seed, flags that go with the other mode refused in one line (exit 2, through
``python -m kvnode`` as a user runs it), and a cluster that cannot be reached: exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.check.cli import main, parse, rerun_command
from kvnode.check.nemesis import KINDS
from kvnode.ops.ports import free_ports


def test_the_defaults_check_every_workload_without_faults_on_three_nodes() -> None:
    options = parse(["--local", "--seed", "5"])
    assert (options.workloads, options.nemesis, options.nodes, options.replication_factor) == (
        ["set", "register", "cas"], [], 3, 3
    )  # fmt: skip
    assert (options.time_s, options.rate, options.keys, options.out, options.cluster) == (
        60.0, 100.0, 5, Path("out/check"), ()
    )  # fmt: skip
    assert options.command == "python -m kvnode check --local --seed 5"
    assert parse(["--local", "--nodes", "2"]).replication_factor == 2


def test_all_faults_and_a_rerun_with_the_seed_drawn() -> None:
    options = parse(["--local", "--nemesis", "all", "--workload", "set"])
    assert options.nemesis == list(KINDS) and options.workloads == ["set"]
    assert (
        options.command
        == f"python -m kvnode check --local --nemesis all --workload set --seed {options.seed}"
    )
    assert rerun_command(["--cluster", "http://a:1", "--seed", "3", "--seed=4"], 8) == (
        "python -m kvnode check --cluster http://a:1 --seed 8"
    )


def test_a_cluster_that_does_not_answer_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_ports(1)[0]}"
    assert main(["--cluster", url, "--time", "1", "--out", str(tmp_path)]) == 2
    assert f"check: cannot run: cannot reach {url}" in capsys.readouterr().out
