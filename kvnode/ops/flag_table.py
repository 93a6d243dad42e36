"""The table of the command line's flags, for ``node`` and ``cluster``: each flag's name, how its value is
parsed, its default and its help; kvnode.ops.flags turns it into parsers and back into a node's argv."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from kvnode.cluster.crash_points import CRASH_POINTS
from kvnode.config import FanoutMode, NodeConfig, ReplicationFactor, check_place_name
from kvnode.ops.argtypes import (
    host,
    http_url,
    http_urls,
    integer,
    non_negative_int,
    port,
    positive_float,
    positive_int,
)
from kvnode.ops.cluster_config import ClusterConfig
from kvnode.paxos.rounds import DEFECTS
from kvnode.replica.channel.protocol import CURRENT_VERSION, MIN_VERSION

__all__ = ["CLUSTER_FLAGS", "NODE_FLAGS", "SECRET_ENV", "Flag"]

SECRET_ENV = "KVNODE_CLUSTER_SECRET"


def _fanout(text: str) -> str:
    modes = get_args(FanoutMode)
    if text not in modes:
        raise argparse.ArgumentTypeError(f"fanout is one of {', '.join(modes)}, got {text!r}")
    return text


def _url_or_none(text: str) -> str:
    """A URL flag that may be unset ("": argparse passes a string default through ``type`` too)."""
    return http_url(text) if text else ""


def _replication_factor(text: str) -> ReplicationFactor:
    try:
        return ReplicationFactor.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _place_name(kind: str) -> Callable[[str], str]:
    """A zone's or a datacenter's name ("": not given)."""

    def parse(text: str) -> str:
        try:
            return check_place_name(kind, text.strip()) if text.strip() else ""
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _place_names(kind: str) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of zone or datacenter names, one a member."""
    name = _place_name(kind)

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name(part) for part in text.split(","))
        if "" in names:
            raise argparse.ArgumentTypeError(f"a {kind} list names each member's {kind}, with none empty")
        return names

    return parse


def _crash_point(text: str) -> str:
    if text and text not in CRASH_POINTS:
        raise argparse.ArgumentTypeError(f"a crash point is one of {', '.join(CRASH_POINTS)}, got {text!r}")
    return text


def _paxos_defect(text: str) -> str:
    if text and text not in DEFECTS:
        raise argparse.ArgumentTypeError(f"a Paxos defect is one of {', '.join(DEFECTS)}, got {text!r}")
    return text


def _max_protocol(text: str) -> int:
    version = integer(text)
    if not (version == 0 or MIN_VERSION <= version <= CURRENT_VERSION):
        raise argparse.ArgumentTypeError(
            f"a replica protocol version is {MIN_VERSION} to {CURRENT_VERSION} (0: the newest), got {text!r}"
        )
    return version


@dataclass(frozen=True)
class Flag:
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
    Flag("--host", host, _DEFAULTS.host, "address to listen on; also the host of this node's URL"),
    Flag(
        "--replication-factor",
        _replication_factor,
        _DEFAULTS.replication_factor,
        "N, how many members of each datacenter hold each key (N: the same in every one; DC:N,DC:N,...: "
        "each one's), set at the cluster's first start and kept with its membership (0: the number of "
        "first members in each; cluster --machines: 3); a request's from is at most the owners in all",
        "N|DC:N,...",
    ),
    Flag(
        "--fanout",
        _fanout,
        _DEFAULTS.fanout,
        "how a coordinator asks replicas: async (all at once), sync (one after another, the baseline) or "
        "speculative (reads ask ack replicas, one more when one is late; writes as async)",
        "|".join(get_args(FanoutMode)),
    ),
    Flag(
        "--timeout-ms",
        positive_int,
        _DEFAULTS.timeout_ms,
        "a replica that has not answered within this many milliseconds counts as failed",
    ),
    Flag(
        "--speculative-ceiling-ms",
        positive_int,
        _DEFAULTS.speculative_ceiling_ms,
        "speculative reads wait for a replica at most this long (less when its p99 is lower) before "
        "asking one more",
    ),
    Flag(
        "--phi-threshold",
        positive_float,
        _DEFAULTS.phi_threshold,
        "a silent peer is taken for dead once its failure detector's phi reaches this",
    ),
    Flag(
        "--acceptable-pause-ms",
        non_negative_int,
        _DEFAULTS.acceptable_pause_ms,
        "a peer silent this much longer than its usual pace raises no suspicion",
    ),
    Flag(
        "--max-clock-skew-ms",
        positive_int,
        _DEFAULTS.max_clock_skew_ms,
        "a replica refuses records stamped further ahead of its wall clock, and no clock moves that far",
    ),
    Flag(
        "--join-timeout-s",
        positive_int,
        _DEFAULTS.join_timeout_s,
        "a member joining that has not answered for this long (it died before it took part) has its join "
        "undone by the claimant, so that later changes may start",
    ),
    Flag(
        "--hint-window-s",
        positive_int,
        _DEFAULTS.hint_window_s,
        "no hints are kept for a replica down longer than this, and older hints are dropped",
    ),
    Flag(
        "--gc-grace-s",
        positive_int,
        _DEFAULTS.gc_grace_s,
        "tombstones and expired values are dropped no sooner than this, and only once every replica of "
        "the key has repaired with this node since; no hint older than this is delivered",
    ),
    Flag(
        "--max-hints-per-peer",
        positive_int,
        _DEFAULTS.max_hints_per_peer,
        "hints kept for one peer at most; more are dropped and counted",
    ),
    Flag("--hint-rate", positive_int, _DEFAULTS.hint_rate, "hints delivered to one peer per second at most"),
    Flag(
        "--repair-interval-s",
        positive_int,
        _DEFAULTS.repair_interval_s,
        "anti-entropy compares this node's summaries with each peer's at least this often",
    ),
    Flag(
        "--repair-rate",
        positive_int,
        _DEFAULTS.repair_rate,
        "records anti-entropy moves (sent and received) per second at most",
    ),
    Flag(
        "--remote-repair-rate",
        non_negative_int,
        _DEFAULTS.remote_repair_rate,
        "records anti-entropy moves per second at most with a peer in another datacenter, paced apart from "
        "--repair-rate (0: the same rate)",
    ),
    Flag("--max-body-bytes", positive_int, _DEFAULTS.max_body_bytes, "largest PUT body accepted (413 above)"),
    Flag(
        "--max-inflight",
        positive_int,
        _DEFAULTS.max_inflight,
        "/v0/entity requests in progress at once; more are answered 503 with Retry-After at once",
    ),
    Flag(
        "--max-inflight-bytes",
        non_negative_int,
        _DEFAULTS.max_inflight_bytes,
        "bytes of /v0/entity request bodies in progress at once, by their Content-Length; more are answered "
        "503 with Retry-After before their body is read (0: a sixteenth of the machine's memory)",
    ),
    Flag(
        "--max-connections",
        non_negative_int,
        _DEFAULTS.max_connections,
        "client connections open at once; more are answered 503 and closed, peers keep a reserve (0: what "
        "the descriptor limit leaves once storage, peers and the process have theirs)",
    ),
    Flag(
        "--header-timeout-s",
        positive_int,
        _DEFAULTS.header_timeout_s,
        "a connection whose request headers have not all arrived within this many seconds is closed",
    ),
    Flag(
        "--idle-timeout-s",
        positive_int,
        _DEFAULTS.idle_timeout_s,
        "an idle keep-alive connection is closed after this many seconds",
    ),
    Flag(
        "--body-timeout-s",
        positive_int,
        _DEFAULTS.body_timeout_s,
        "a PUT whose body has not all arrived within this many seconds is answered 408",
    ),
    Flag(
        "--cluster-secret-file",
        Path,
        None,
        f"file holding the secret every node of the cluster shares; peers must prove they hold it "
        f"(or set {SECRET_ENV}; without either the replica channel is unauthenticated)",
        "FILE",
        optional=True,
    ),
    Flag(
        "--auth-tokens-file",
        Path,
        None,
        "file of client tokens, one 'TOKEN ROLE' a line (roles read, readwrite, admin), readable by its "
        "owner only, read again on SIGHUP; every client request then needs 'Authorization: Bearer TOKEN' "
        "(without it clients are not authenticated)",
        "FILE",
        optional=True,
    ),
    Flag("--metrics-open", None, False, "with --auth-tokens-file, /metrics still answers without a token"),
    Flag("--fsync", None, False, "fsync every write before acknowledging it (survives power loss; slower)"),
    Flag("--access-log", None, False, "log every HTTP request"),
]
NODE_FLAGS = [
    Flag("--port", port, None, "port to listen on (required)"),
    Flag(
        "--client-port",
        port,
        None,
        "also serve clients on this port, shared with this machine's other nodes (SO_REUSEPORT), so "
        "clients need one URL per machine; peers still use each node's own URL",
        optional=True,
    ),
    Flag("--data-dir", Path, None, "LevelDB directory, created if missing (required)", "DIR"),
    Flag(
        "--cluster",
        http_urls,
        (),
        "every node's URL, comma-separated, the same list in the same order on every node; must include "
        "this node's http://HOST:PORT (https:// with TLS; default: a cluster of one)",
        "URL,URL,...",
    ),
    Flag(
        "--zones",
        _place_names("zone"),
        (),
        "each first member's zone (a rack, an availability zone), comma-separated in the order of "
        "--cluster, the same on every first member; a key's replicas go to distinct zones first "
        "(default: each member's host)",
        "ZONE,ZONE,...",
    ),
    Flag(
        "--datacenters",
        _place_names("datacenter"),
        (),
        "each first member's datacenter, comma-separated in the order of --cluster, the same on every "
        "first member; each datacenter holds its own N copies of a key (default: one datacenter, dc1)",
        "DC,DC,...",
    ),
    Flag(
        "--zone",
        _place_name("zone"),
        _DEFAULTS.zone,
        "with --join: this node's zone (default: its host); a node replacing a member takes its zone",
        "ZONE",
    ),
    Flag(
        "--datacenter",
        _place_name("datacenter"),
        _DEFAULTS.datacenter,
        "with --join: this node's datacenter (default: dc1); a node replacing a member takes its datacenter",
        "DC",
    ),
    Flag(
        "--advertise-url",
        str,
        _DEFAULTS.advertise_url,
        "the URL the cluster list names this node by, when peers reach it through a proxy "
        "(default: http://HOST:PORT)",
        "URL",
    ),
    Flag(
        "--join",
        _url_or_none,
        _DEFAULTS.join,
        "become a member: learn the cluster from this member, join it (or with --replace take a "
        "member's place), and get every record this node will own (it needs the cluster's secret)",
        "SEED_URL",
    ),
    Flag(
        "--replace",
        _url_or_none,
        _DEFAULTS.replace,
        "take the place of this member, down for good: this node gets its position in placement and "
        "rebuilds its data from the other replicas (with --join)",
        "MEMBER_URL",
    ),
    Flag(
        "--tls-cert",
        Path,
        None,
        "this node's certificate (PEM); with --tls-key and --tls-ca the node serves https:// only and its "
        "replica channel speaks TLS",
        "FILE",
        optional=True,
    ),
    Flag("--tls-key", Path, None, "the private key of --tls-cert (PEM)", "FILE", optional=True),
    Flag(
        "--tls-ca",
        Path,
        None,
        "the CA (PEM) that signed every member's certificate; peers verify each other against it",
        "FILE",
        optional=True,
    ),
    Flag("--tls-client-auth", None, False, "clients must present a certificate the --tls-ca signed"),
    Flag(
        "--clock-offset-ms",
        integer,
        _DEFAULTS.clock_offset_ms,
        "testing aid: shift this node's view of the wall clock by this many milliseconds (may be negative)",
    ),
    Flag(
        "--crash-at",
        _crash_point,
        _DEFAULTS.crash_at,
        f"testing aid: end the process as kill -9 would at this point of a membership change "
        f"({', '.join(CRASH_POINTS)})",
        "POINT",
    ),
    Flag(
        "--paxos-defect",
        _paxos_defect,
        _DEFAULTS.paxos_defect,
        f"testing aid: plant a defect in the conditional writes' proposer for a checker to catch "
        f"({', '.join(DEFECTS)})",
        "DEFECT",
    ),
    Flag(
        "--max-protocol",
        _max_protocol,
        _DEFAULTS.max_protocol,
        f"for rolling upgrades and tests: speak replica protocol versions up to this one only, as an older "
        f"kvnode does ({MIN_VERSION} to {CURRENT_VERSION}; default 0: the newest, {CURRENT_VERSION})",
        "VERSION",
    ),
    *_SHARED,
]
CLUSTER_FLAGS = [
    Flag("--nodes", positive_int, ClusterConfig().nodes, "how many node processes to start"),
    Flag(
        "--machines",
        non_negative_int,
        0,
        "model this many machines on loopback (127.0.0.1, 127.0.0.2, ...: distinct hosts, so every key's "
        "replicas are on distinct machines), each running --per-machine members that share --port for "
        "clients (instead of --nodes)",
    ),
    Flag(
        "--per-machine",
        non_negative_int,
        0,
        "with --machines: members per machine, on the ports after --port (default 0: one per core)",
    ),
    Flag(
        "--model-datacenters",
        non_negative_int,
        0,
        "model this many datacenters, dc1, dc2, ...: the machines (or nodes) split into as many runs, one "
        "a datacenter, each holding N copies of every key (default 0: one datacenter)",
    ),
    Flag(
        "--model-zones",
        non_negative_int,
        0,
        "model this many zones in each datacenter, z1, z2, ...: its machines (or nodes) dealt to them in "
        "turn (default 0: each machine a zone of its own)",
    ),
    Flag("--port", port, _DEFAULTS.port, "port of the first node; the others follow consecutively"),
    Flag("--data-dir", Path, _DEFAULTS.data_dir, "each node keeps its data in DATA_DIR/node-PORT", "DIR"),
    Flag(
        "--tls",
        None,
        False,
        "serve https:// with a throwaway CA and certificates for each node, made in DATA_DIR/tls",
    ),
    *_SHARED,
]
