"""The command line's flags: one table for ``node`` and ``cluster``, each flag with a KVNODE_* environment
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from kvnode.access.client_auth import read_tokens_file
from kvnode.cluster.crash_points import CRASH_POINTS
from kvnode.config import FanoutMode, NodeConfig
from kvnode.ops.argtypes import host, http_url, http_urls, integer, non_negative_int, port, positive_int
from kvnode.ops.cluster_config import ClusterConfig
from kvnode.ops.parsing import OneLineParser
from kvnode.replica.auth import MIN_SECRET_BYTES

__all__ = [
    "SECRET_ENV",
    "node_argv",
    "node_env",
    "parse_args",
    "read_cluster_secret",
    "unknown_variables",
    "warn_unknown_variables",
]

SECRET_ENV = "KVNODE_CLUSTER_SECRET"


def _fanout(text: str) -> str:
    modes = get_args(FanoutMode)
    if text not in modes:
        raise argparse.ArgumentTypeError(f"fanout is one of {', '.join(modes)}, got {text!r}")
    return text


def _url_or_none(text: str) -> str:
    """A URL flag that may be unset ("": argparse passes a string default through ``type`` too)."""
    return http_url(text) if text else ""


def _crash_point(text: str) -> str:
    if text and text not in CRASH_POINTS:
        raise argparse.ArgumentTypeError(f"a crash point is one of {', '.join(CRASH_POINTS)}, got {text!r}")
    return text


def _switch(text: str) -> bool:
    """Environment form of an on/off flag."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 1/0, true/false, yes/no or on/off, got {text!r}")


@dataclass(frozen=True)
class _Flag:
    name: str
    parse: Callable[[str], Any] | None  # None: an on/off switch
    default: Any
    help: str
    metavar: str | None = None
    optional: bool = False  # a default of None is then "not given", not "required"

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")

    @property
    def env(self) -> str:
        return "KVNODE_" + self.dest.upper()


_DEFAULTS = NodeConfig()
_SHARED = [
    _Flag("--host", host, _DEFAULTS.host, "address to listen on; also the host of this node's URL"),
    _Flag(
        "--fanout",
        _fanout,
        _DEFAULTS.fanout,
        "how a coordinator asks replicas: async (all at once), sync (one after another, the baseline) or "
        "speculative (reads ask ack replicas, one more when one is late; writes as async)",
        "|".join(get_args(FanoutMode)),
    ),
    _Flag(
        "--timeout-ms",
        positive_int,
        _DEFAULTS.timeout_ms,
        "a replica that has not answered within this many milliseconds counts as failed",
    ),
    _Flag(
        "--speculative-ceiling-ms",
        positive_int,
        _DEFAULTS.speculative_ceiling_ms,
        "speculative reads wait for a replica at most this long (less when its p99 is lower) before "
        "asking one more",
    ),
    _Flag(
        "--max-clock-skew-ms",
        positive_int,
        _DEFAULTS.max_clock_skew_ms,
        "a replica refuses records stamped further ahead of its wall clock, and no clock moves that far",
    ),
    _Flag(
        "--hint-window-s",
        positive_int,
        _DEFAULTS.hint_window_s,
        "no hints are kept for a replica down longer than this, and older hints are dropped",
    ),
    _Flag(
        "--gc-grace-s",
        positive_int,
        _DEFAULTS.gc_grace_s,
        "tombstones and expired values are dropped no sooner than this, and only once every replica of "
        "the key has repaired with this node since; no hint older than this is delivered",
    ),
    _Flag(
        "--max-hints-per-peer",
        positive_int,
        _DEFAULTS.max_hints_per_peer,
        "hints kept for one peer at most; more are dropped and counted",
    ),
    _Flag("--hint-rate", positive_int, _DEFAULTS.hint_rate, "hints delivered to one peer per second at most"),
    _Flag(
        "--repair-interval-s",
        positive_int,
        _DEFAULTS.repair_interval_s,
        "anti-entropy compares this node's summaries with each peer's at least this often",
    ),
    _Flag(
        "--repair-rate",
        positive_int,
        _DEFAULTS.repair_rate,
        "records anti-entropy moves (sent and received) per second at most",
    ),
    _Flag(
        "--max-body-bytes", positive_int, _DEFAULTS.max_body_bytes, "largest PUT body accepted (413 above)"
    ),
    _Flag(
        "--max-inflight",
        positive_int,
        _DEFAULTS.max_inflight,
        "/v0/entity requests in progress at once; more are answered 503 with Retry-After at once",
    ),
    _Flag(
        "--max-inflight-bytes",
        non_negative_int,
        _DEFAULTS.max_inflight_bytes,
        "bytes of /v0/entity request bodies in progress at once, by their Content-Length; more are answered "
        "503 with Retry-After before their body is read (0: a sixteenth of the machine's memory)",
    ),
    _Flag(
        "--max-connections",
        non_negative_int,
        _DEFAULTS.max_connections,
        "client connections open at once; more are answered 503 and closed, peers keep a reserve (0: what "
        "the descriptor limit leaves once storage, peers and the process have theirs)",
    ),
    _Flag(
        "--header-timeout-s",
        positive_int,
        _DEFAULTS.header_timeout_s,
        "a connection whose request headers have not all arrived within this many seconds is closed",
    ),
    _Flag(
        "--idle-timeout-s",
        positive_int,
        _DEFAULTS.idle_timeout_s,
        "an idle keep-alive connection is closed after this many seconds",
    ),
    _Flag(
        "--body-timeout-s",
        positive_int,
        _DEFAULTS.body_timeout_s,
        "a PUT whose body has not all arrived within this many seconds is answered 408",
    ),
    _Flag(
        "--cluster-secret-file",
        Path,
        None,
        f"file holding the secret every node of the cluster shares; peers must prove they hold it "
        f"(or set {SECRET_ENV}; without either the replica channel is unauthenticated)",
        "FILE",
        optional=True,
    ),
    _Flag(
        "--auth-tokens-file",
        Path,
        None,
        "file of client tokens, one 'TOKEN ROLE' a line (roles read, readwrite, admin), readable by its "
        "owner only, read again on SIGHUP; every client request then needs 'Authorization: Bearer TOKEN' "
        "(without it clients are not authenticated)",
        "FILE",
        optional=True,
    ),
    _Flag("--metrics-open", None, False, "with --auth-tokens-file, /metrics still answers without a token"),
    _Flag("--fsync", None, False, "fsync every write before acknowledging it (survives power loss; slower)"),
    _Flag("--access-log", None, False, "log every HTTP request"),
]
_NODE = [
    _Flag("--port", port, None, "port to listen on (required)"),
    _Flag(
        "--client-port",
        port,
        None,
        "also serve clients on this port, shared with this machine's other nodes (SO_REUSEPORT), so "
        "clients need one URL per machine; peers still use each node's own URL",
        optional=True,
    ),
    _Flag("--data-dir", Path, None, "LevelDB directory, created if missing (required)", "DIR"),
    _Flag(
        "--cluster",
        http_urls,
        (),
        "every node's URL, comma-separated, the same list in the same order on every node; must include "
        "this node's http://HOST:PORT (https:// with TLS; default: a cluster of one)",
        "URL,URL,...",
    ),
    _Flag(
        "--advertise-url",
        str,
        _DEFAULTS.advertise_url,
        "the URL the cluster list names this node by, when peers reach it through a proxy "
        "(default: http://HOST:PORT)",
        "URL",
    ),
    _Flag(
        "--join",
        _url_or_none,
        _DEFAULTS.join,
        "become a member: learn the cluster from this member, join it (or with --replace take a "
        "member's place), and get every record this node will own (it needs the cluster's secret)",
        "SEED_URL",
    ),
    _Flag(
        "--replace",
        _url_or_none,
        _DEFAULTS.replace,
        "take the place of this member, down for good: this node gets its position in placement and "
        "rebuilds its data from the other replicas (with --join)",
        "MEMBER_URL",
    ),
    _Flag(
        "--tls-cert",
        Path,
        None,
        "this node's certificate (PEM); with --tls-key and --tls-ca the node serves https:// only and its "
        "replica channel speaks TLS",
        "FILE",
        optional=True,
    ),
    _Flag("--tls-key", Path, None, "the private key of --tls-cert (PEM)", "FILE", optional=True),
    _Flag(
        "--tls-ca",
        Path,
        None,
        "the CA (PEM) that signed every member's certificate; peers verify each other against it",
        "FILE",
        optional=True,
    ),
    _Flag("--tls-client-auth", None, False, "clients must present a certificate the --tls-ca signed"),
    _Flag(
        "--clock-offset-ms",
        integer,
        _DEFAULTS.clock_offset_ms,
        "testing aid: shift this node's view of the wall clock by this many milliseconds (may be negative)",
    ),
    _Flag(
        "--crash-at",
        _crash_point,
        _DEFAULTS.crash_at,
        f"testing aid: end the process as kill -9 would at this point of a membership change "
        f"({', '.join(CRASH_POINTS)})",
        "POINT",
    ),
    *_SHARED,
]
_CLUSTER = [
    _Flag("--nodes", positive_int, ClusterConfig().nodes, "how many node processes to start"),
    _Flag(
        "--machines",
        non_negative_int,
        0,
        "model this many machines on loopback (127.0.0.1, 127.0.0.2, ...: distinct hosts, so every key's "
        "replicas are on distinct machines), each running --per-machine members that share --port for "
        "clients (instead of --nodes)",
    ),
    _Flag(
        "--per-machine",
        non_negative_int,
        0,
        "with --machines: members per machine, on the ports after --port (default 0: one per core)",
    ),
    _Flag("--port", port, _DEFAULTS.port, "port of the first node; the others follow consecutively"),
    _Flag("--data-dir", Path, _DEFAULTS.data_dir, "each node keeps its data in DATA_DIR/node-PORT", "DIR"),
    _Flag(
        "--tls",
        None,
        False,
        "serve https:// with a throwaway CA and certificates for each node, made in DATA_DIR/tls",
    ),
    *_SHARED,
]


@dataclass(frozen=True)
class _BadEnv:
    """A default read from a malformed environment variable: an error only if no flag overrides it."""

    message: str


def _add_flags(parser: OneLineParser, flags: Sequence[_Flag], env: Mapping[str, str]) -> None:
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
    commands = parser.add_subparsers(dest="command", metavar="{cluster,node,admin}")
    subparsers = {
        "cluster": commands.add_parser("cluster", help="start a local cluster of node processes"),
        "node": commands.add_parser("node", help="run one node"),
    }
    commands.add_parser(
        "admin", help="a running node's view of its cluster (see admin --help)"
    )  # kvnode.ops.admin
    _add_flags(subparsers["cluster"], _CLUSTER, env)
    _add_flags(subparsers["node"], _NODE, env)
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
        nodes, tls = values.pop("nodes"), values.pop("tls")
        machines, per_machine = values.pop("machines"), values.pop("per_machine")
        return ClusterConfig(
            nodes=nodes, node=NodeConfig(**values), tls=tls, machines=machines, per_machine=per_machine
        )
    except ValueError as error:
        command.error(str(error))


def _not_a_directory(path: Path) -> Path | None:
    """The nearest existing part of ``path`` (itself or a parent) if it is not a directory: a data dir
    there cannot be created (LevelDB would only say "File exists" or "Not a directory")."""
    existing = next((part for part in (path, *path.parents) if part.exists()), None)
    return None if existing is None or existing.is_dir() else existing


# Variables read elsewhere than from a flag: the cluster secret, and admin's node URL.
_OTHER_VARIABLES = (SECRET_ENV, "KVNODE_URL")


def _known_variables() -> list[str]:
    return sorted({flag.env for flag in (*_NODE, *_CLUSTER)} | set(_OTHER_VARIABLES))


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
    for flag in _NODE:
        value = getattr(config, flag.dest)
        if flag.parse is None:
            argv += [flag.name] if value else []
        elif value not in (None, "", ()):
            argv += [flag.name, ",".join(value) if isinstance(value, tuple) else str(value)]
    return argv
