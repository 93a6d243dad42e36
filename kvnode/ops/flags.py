"""The command line's flags (their table: kvnode.ops.flag_table), each with a KVNODE_* environment
variable (``--timeout-ms`` is ``KVNODE_TIMEOUT_MS``; the flag wins), parsed into a NodeConfig or a
ClusterConfig; and the reverse, :func:`node_argv`, the command line that runs a node with a given config.
Bad input exits 2 with one line.

The cluster secret is read from ``--cluster-secret-file`` (a file only its owner may read) or taken from
``KVNODE_CLUSTER_SECRET``, never from the command line (other local users can read a process's
arguments)."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvnode.access.client_auth import read_tokens_file
from kvnode.config import NodeConfig
from kvnode.ops.cluster_config import ClusterConfig
from kvnode.ops.flag_table import CLUSTER_FLAGS, NODE_FLAGS, SECRET_ENV, Flag
from kvnode.ops.parsing import OneLineParser
from kvnode.replica.channel.handshake import MIN_SECRET_BYTES

__all__ = [
    "SECRET_ENV",
    "node_argv",
    "node_env",
    "parse_args",
    "read_cluster_secret",
    "unknown_variables",
    "warn_unknown_variables",
]


def _switch(text: str) -> bool:
    """Environment form of an on/off flag."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 1/0, true/false, yes/no or on/off, got {text!r}")


@dataclass(frozen=True)
class _BadEnv:
    """A default read from a malformed environment variable: an error only if no flag overrides it."""

    message: str


def _add_flags(parser: OneLineParser, flags: Sequence[Flag], env: Mapping[str, str]) -> None:
    for flag in flags:
        default = flag.default
        if flag.env in env:
            try:
                default = (flag.parse or _switch)(env[flag.env])
            except (argparse.ArgumentTypeError, ValueError) as error:
                default = _BadEnv(f"{flag.env}: {error}")
        help_text = f"{flag.help} [env {flag.env}]"
        if flag.parse is None:
            parser.add_argument(flag.name, action="store_true", default=default, help=help_text)
        else:
            # An empty default (None, "", ()) means "not set": the help says what that does, so no
            # "(default: )" follows it.
            shown = "" if flag.default in (None, "", ()) else f" (default: {flag.default})"
            parser.add_argument(
                flag.name,
                type=flag.parse,
                default=default,
                required=default is None and not flag.optional,
                metavar=flag.metavar,
                help=help_text + shown,
            )


def parse_args(argv: Sequence[str], env: Mapping[str, str]) -> NodeConfig | ClusterConfig:
    args = list(argv)
    if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help")):
        args.insert(0, "cluster")
    parser = OneLineParser(
        prog="python -m kvnode",
        description="kvnode: a small Dynamo-style key-value store. Without a command, starts a local "
        "3-node cluster (`cluster` with its defaults).",
    )
    commands = parser.add_subparsers(dest="command", metavar="{cluster,node,admin,check}")
    subparsers = {
        "cluster": commands.add_parser("cluster", help="start a local cluster of node processes"),
        "node": commands.add_parser("node", help="run one node"),
    }
    commands.add_parser(
        "admin", help="a running node's view of its cluster (see admin --help)"
    )  # kvnode.ops.admin
    # kvnode.__main__ hands `check` to kvnode.check, a layer above: named here for --help and typos only.
    commands.add_parser("check", help="a Jepsen-style check of a cluster under faults (see check --help)")
    _add_flags(subparsers["cluster"], CLUSTER_FLAGS, env)
    _add_flags(subparsers["node"], NODE_FLAGS, env)
    values = vars(parser.parse_args(args))
    name = values.pop("command")
    command = subparsers[name]
    for value in values.values():
        if isinstance(value, _BadEnv):
            command.error(value.message)
    in_the_way = _not_a_directory(values["data_dir"])
    if in_the_way is not None:
        where = "" if in_the_way == values["data_dir"] else f": {in_the_way}"
        command.error(f"--data-dir {values['data_dir']}{where} exists and is not a directory")
    try:
        values["cluster_secret"] = read_cluster_secret(values["cluster_secret_file"], env)
        if values["auth_tokens_file"] is not None:
            read_tokens_file(values["auth_tokens_file"])  # refused here, before any node starts
    except ValueError as error:
        command.error(str(error))
    try:
        if name == "node":
            return NodeConfig(**values)
        shape = {name: values.pop(name) for name in _CLUSTER_SHAPE}
        return ClusterConfig(node=NodeConfig(**values), **shape)
    except ValueError as error:
        command.error(str(error))


# The cluster command's flags that shape the cluster (ClusterConfig's fields), not each node.
_CLUSTER_SHAPE = ("nodes", "tls", "machines", "per_machine", "model_datacenters", "model_zones")


def _not_a_directory(path: Path) -> Path | None:
    """The nearest existing part of ``path`` (itself or a parent) if it is not a directory: a data dir
    there cannot be created (LevelDB would only say "File exists" or "Not a directory")."""
    existing = next((part for part in (path, *path.parents) if part.exists()), None)
    return None if existing is None or existing.is_dir() else existing


# Variables read elsewhere than from a flag: the cluster secret, and admin's node URL.
_OTHER_VARIABLES = (SECRET_ENV, "KVNODE_URL")


def _known_variables() -> list[str]:
    return sorted({flag.env for flag in (*NODE_FLAGS, *CLUSTER_FLAGS)} | set(_OTHER_VARIABLES))


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """KVNODE_* variables in ``env`` that kvnode does not read (a misspelling such as KVNODE_PROT)."""
    known = set(_known_variables())
    return sorted(name for name in env if name.startswith("KVNODE_") and name not in known)


def warn_unknown_variables(env: Mapping[str, str]) -> None:
    """One line on stderr per unknown KVNODE_* variable, naming the closest known one.

    A warning, not an error: the environment is shared by every program a shell starts, and a stray
    variable (one a newer or older kvnode reads, or a typo that does not matter today) must not stop a
    node from starting, say after a restart by a supervisor. Ignoring it silently would hide a typo that
    does matter, so the warning names it and the variable that was probably meant.
    """
    for name in unknown_variables(env):
        close = difflib.get_close_matches(name, _known_variables(), n=1)
        meant = f" (did you mean {close[0]}?)" if close else ""
        print(f"kvnode: warning: {name} is not a kvnode variable and is ignored{meant}", file=sys.stderr)


def read_cluster_secret(path: Path | None, env: Mapping[str, str]) -> bytes:
    """The secret from the file, else from the environment, else b"" (none); ValueError with one line if
    it is unusable. Errors never quote it."""
    if path is not None:
        try:
            mode = path.stat().st_mode & 0o777
            secret = path.read_bytes().strip()
        except OSError as error:
            raise ValueError(f"cannot read the cluster secret file {path}: {error.strerror}") from None
        if mode & 0o077:
            # Whoever can read the file can join the cluster; as ssh does with a private key, refuse it.
            raise ValueError(
                f"the cluster secret file {path} is open to group or others (mode {mode:04o}): "
                f"chmod 600 {path}"
            )
    else:
        secret = env.get(SECRET_ENV, "").strip().encode()
        if not secret:
            return b""
    if len(secret) < MIN_SECRET_BYTES:
        where = SECRET_ENV if path is None else str(path)
        raise ValueError(f"the cluster secret in {where} must be at least {MIN_SECRET_BYTES} bytes long")
    return secret


def node_env(config: NodeConfig) -> dict[str, str]:
    """Environment to add for a node started with this configuration: the cluster secret, unless the
    node reads it from its file (node_argv passes the path)."""
    if config.cluster_secret and config.cluster_secret_file is None:
        return {SECRET_ENV: config.cluster_secret.decode("utf-8", "surrogateescape")}
    return {}


def node_argv(config: NodeConfig) -> list[str]:
    """The command line that runs a node with this configuration: every node flag, its value read from
    the NodeConfig field of the same name (so parse_args gives the config back). An unset value (None,
    "", ()) and a switch that is off are left out."""
    argv = [sys.executable, "-m", "kvnode", "node"]
    for flag in NODE_FLAGS:
        value = getattr(config, flag.dest)
        if flag.parse is None:
            argv += [flag.name] if value else []
        elif value not in (None, "", ()):
            argv += [flag.name, ",".join(value) if isinstance(value, tuple) else str(value)]
    return argv
