"""kvnode.ops.flags: the command line and its environment variables, parsed into a config or refused with
one line (exit 2), and node_argv, the command line back from a config. Real processes where a node runs."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from kvnode.ops.ports import free_ports
from kvnode.replica.channel.protocol import CURRENT_VERSION
from tests.harness import (
    DEADLINE,
    assert_exit_2_with_one_line,
    clean_env,
    refuses_connections,
    request,
    run_kvnode,
    serves,
    started,
    wait_for,
    write_secret_file,
)

SECRET = "a cluster secret of more than enough bytes"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_secret_file_open_to_group_or_others_is_refused_naming_the_fix(tmp_path: Path, mode: int) -> None:
    secret_file = write_secret_file(tmp_path / "cluster.secret", SECRET)
    secret_file.chmod(mode)
    args = [
        "node",
        "--port",
        str(free_ports(1)[0]),
        "--data-dir",
        "d",
        "--cluster-secret-file",
        str(secret_file),
    ]
    stderr = assert_exit_2_with_one_line(run_kvnode(args, tmp_path))
    assert f"chmod 600 {secret_file}" in stderr and SECRET not in stderr, stderr
    assert not (tmp_path / "d").exists()


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
        ["node", "--port", "PORT", "--data-dir", "d", "--hint-window-s", "61", "--gc-grace-s", "60"],
        ["node", "--port", "PORT", "--data-dir", "d", "--gc-grace-s", "0"],
        ["node", "--port", "PORT", "--data-dir", "d", "--no-such-flag"],
        ["node", "--data-dir", "d"],  # no --port
        ["node", "--port", "PORT"],  # no --data-dir
        ["node", "--port", "PORT", "--data-dir", "d", "--cluster", "http://127.0.0.1:1,http://127.0.0.1:2"],
        ["node", "--port", "PORT", "--data-dir", "d", "--cluster", "not-a-url"],
        ["node", "--port", "PORT", "--data-dir", "d", "--cluster", "SELF,SELF"],
        ["node", "--port", "PORT", "--data-dir", "d", "--cluster", "SELF", "--replication-factor", "2"],
        ["node", "--port", "PORT", "--data-dir", "d", "--replication-factor", "-1"],
        ["node", "--port", "PORT", "--data-dir", "d", "--max-protocol", str(CURRENT_VERSION + 1)],
        ["node", "--port", "PORT", "--data-dir", "d", "--max-protocol", "-1"],
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
    assert_exit_2_with_one_line(run_kvnode(argv, tmp_path))
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
    result = run_kvnode(args, tmp_path, clean_env(**{variable: value}))
    stderr = assert_exit_2_with_one_line(result)
    assert variable in stderr, stderr


def test_a_misspelled_variable_is_named_in_a_warning_with_the_closest_known_one(tmp_path: Path) -> None:
    result = run_kvnode(["node", "--help"], tmp_path, clean_env(KVNODE_PROT="8081"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "kvnode: warning: KVNODE_PROT is not a kvnode variable and is ignored (did you mean KVNODE_PORT?)\n"
    )
    # A flag error still ends the command; the warning says what was probably meant.
    result = run_kvnode(["node", "--data-dir", "d"], tmp_path, clean_env(KVNODE_PROT="8081"))
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
            run_kvnode(["node", "--port", str(port), "--data-dir", str(data_dir)], tmp_path)
        )
        assert str(regular_file) in stderr
        assert "is not a directory" in stderr and "File exists" not in stderr, stderr
        assert refuses_connections(port)
    assert regular_file.read_text() == "not a directory\n"


def test_environment_variables_configure_a_node(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    env = clean_env(
        KVNODE_PORT=str(port), KVNODE_DATA_DIR=str(tmp_path / "env-data"), KVNODE_MAX_BODY_BYTES="10"
    )
    with started(["node"], tmp_path, env, tmp_path / "node.log") as process:
        wait_for(
            lambda: serves(port) or process.poll() is not None, DEADLINE, "the node to serve on KVNODE_PORT"
        )
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
        wait_for(
            lambda: serves(flag_port) or process.poll() is not None, DEADLINE, "the node to serve on --port"
        )
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
        result = run_kvnode([command, "--help"], tmp_path)
        assert result.returncode == 0, result.stderr
        assert "(default: )" not in result.stdout, command
        for flag in flags:
            assert flag in result.stdout, (command, flag)
            env = "KVNODE_" + flag.removeprefix("--").replace("-", "_").upper()
            assert env in result.stdout, (command, env)
    result = run_kvnode(["--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "cluster" in result.stdout and "node" in result.stdout
