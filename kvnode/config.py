"""A node's configuration: one frozen dataclass, built once from the command line and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["FanoutMode", "NodeConfig", "node_url"]

FanoutMode = Literal["async", "sync", "speculative"]


def node_url(host: str, port: int, tls: bool = False) -> str:
    """The URL of a node listening on HOST:PORT, https:// with TLS; an IPv6 address goes in brackets
    (RFC 3986)."""
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


@dataclass(frozen=True, slots=True)
class NodeConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    # A client port this node shares with the other nodes of its machine (SO_REUSEPORT: the kernel spreads
    # connections over them), so clients keep one URL per machine. Peers use each node's own URL.
    client_port: int | None = None
    data_dir: Path = Path("data")
    cluster: tuple[str, ...] = ()  # every node's URL, in the same order on every node; () = just this one
    # N: how many members hold each key, stored with the membership at the cluster's first start (a
    # restart with another value keeps the stored one); 0 = the number of first members.
    replication_factor: int = 0
    fanout: FanoutMode = "async"
    timeout_ms: int = 1000
    speculative_ceiling_ms: int = 50  # the longest a speculative read waits before asking one more
    # When a silent peer is taken for dead (kvnode.replica.failure_detector.DetectorSettings, whose defaults
    # these are): the phi it is convicted at, and how long a stall beyond its usual pace raises no suspicion.
    phi_threshold: float = 8.0
    acceptable_pause_ms: int = 1500
    max_clock_skew_ms: int = 5000  # records stamped further ahead of the wall clock are refused
    clock_offset_ms: int = 0  # shifts this node's view of the wall clock (a testing aid)
    crash_at: str = ""  # a point of a membership change where the node ends as kill -9 would (a testing aid)
    paxos_defect: str = ""  # a planted defect in the conditional writes' proposer (a testing aid)
    # The newest replica protocol version the node speaks (kvnode.replica.channel.protocol), for rolling
    # upgrades and tests: 0 = the newest this kvnode has.
    max_protocol: int = 0
    hint_window_s: int = 10800  # no hints for a replica down longer; older hints are dropped
    # Tombstones (and expired versions) are kept at least this long (docs/gc.md); no hint older is
    # delivered, so the hint window may not be longer.
    gc_grace_s: int = 864_000
    max_hints_per_peer: int = 100_000
    hint_rate: int = 2000  # hints delivered to one peer per second at most
    repair_interval_s: int = 3600  # anti-entropy compares with each peer at least this often
    # Records anti-entropy moves per second at most: a rebuild of 100,000 records takes about 20 s.
    repair_rate: int = 5000
    max_body_bytes: int = 16 * 1024 * 1024
    body_timeout_s: int = 10  # a PUT whose body has not all arrived by then is answered 408
    # /v0/entity requests in progress at once; more are answered 503 at once. The knee of latency vs
    # concurrency measured on one node (docs/benchmarks.md) is below 256; 256 is the floor, so that a
    # 64-connection benchmark against three coordinators is never shed.
    max_inflight: int = 256
    # Bytes of request bodies in progress at once (Content-Length, counted before the body is read); more
    # are answered 503 at once. 0 = four times max_body_bytes, at least 64 MiB (kvnode.access.admission).
    max_inflight_bytes: int = 0
    # Client connections open at once; 0 = what the descriptor limit leaves once storage, peers and the
    # process have theirs (kvnode.access.connections).
    max_connections: int = 0
    header_timeout_s: int = 10  # a connection whose request headers have not all arrived by then is closed
    idle_timeout_s: int = 60  # an idle keep-alive connection is closed after this long
    # The replica channel's shared secret ("" = unauthenticated); never printed (repr=False).
    cluster_secret: bytes = field(default=b"", repr=False)
    cluster_secret_file: Path | None = None  # where it was read from, if from a file
    fsync: bool = False
    access_log: bool = False
    # The URL the cluster list names this node by, when peers reach it at another address than
    # http://HOST:PORT (through a proxy, as loadtest's slow-replica scenario does); "" = http://HOST:PORT.
    advertise_url: str = ""
    # Becoming a member (kvnode.cluster.bootstrap): a member to learn the cluster from, and the member down
    # for good whose place this node takes ("" = join as a member more). Ignored once the data dir holds
    # the membership.
    join: str = ""
    replace: str = ""
    # A member joining that has been silent this long (its channel neither open nor opening) is taken for
    # gone, and its join undone by the claimant (kvnode.cluster.join_watcher), so later changes may start.
    join_timeout_s: int = 300
    # TLS (kvnode.access.tls): this node's certificate and key, and the CA every member's certificate is
    # signed by; all three or none. With them the node serves https:// only and its replica channel speaks
    # TLS.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    tls_client_auth: bool = False  # clients must present a certificate the CA signed
    auth_tokens_file: Path | None = None  # client tokens and their roles (kvnode.access.client_auth)
    metrics_open: bool = False  # /metrics answers without a token, as exporters usually do

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be between 1 and 65535, got {self.port}")
        if self.client_port is not None and not (
            0 < self.client_port < 65536 and self.client_port != self.port
        ):
            raise ValueError(f"--client-port must be a port other than --port, got {self.client_port}")
        if self.cluster and self.url not in self.cluster:
            raise ValueError(
                f"this node's URL {self.url} is not in the cluster list {','.join(self.cluster)}"
            )
        if len(set(self.cluster)) != len(self.cluster):
            raise ValueError("the cluster list names a node twice")
        if self.cluster and self.replication_factor > len(self.cluster):
            raise ValueError(
                f"--replication-factor {self.replication_factor} exceeds the {len(self.cluster)} members "
                "of --cluster"
            )
        if self.hint_window_s > self.gc_grace_s:
            # A hint delivered after the tombstones it could have been beaten by were dropped would bring
            # a deleted value back.
            raise ValueError(
                f"--hint-window-s {self.hint_window_s} is longer than --gc-grace-s {self.gc_grace_s}: a "
                f"deleted value could come back; make the hint window at most the grace period"
            )
        if self.replace and not self.join:
            raise ValueError("--replace takes --join SEED_URL (a member to learn the cluster from)")
        if self.join and self.cluster:
            raise ValueError("--join learns the members from the seed: leave --cluster out")
        if self.replace and self.replace == self.url:
            raise ValueError(f"--replace names this node's own URL {self.url}")
        tls_files = (self.tls_cert, self.tls_key, self.tls_ca)
        if any(tls_files) and not all(tls_files):
            raise ValueError("--tls-cert, --tls-key and --tls-ca go together")
        if self.tls_client_auth and not self.tls:
            raise ValueError("--tls-client-auth needs --tls-cert, --tls-key and --tls-ca")
        scheme = "https://" if self.tls else "http://"
        other = [url for url in self.members if not url.startswith(scheme)]
        if other:
            with_tls = "with" if self.tls else "without"
            raise ValueError(f"{with_tls} TLS every member's URL is {scheme}..., not {other[0]}")

    @property
    def tls(self) -> bool:
        """Whether the node serves https:// and its replica channel speaks TLS."""
        return self.tls_cert is not None

    @property
    def url(self) -> str:
        return self.advertise_url or node_url(self.host, self.port, self.tls)

    @property
    def members(self) -> tuple[str, ...]:
        return self.cluster or (self.url,)

    @property
    def timeout(self) -> float:
        """The replica timeout in seconds."""
        return self.timeout_ms / 1000
