"""A node's configuration: one frozen dataclass, built once from the command line and passed down; and the
values of its flags that lower layers read too (the fan-out mode, a replication factor per datacenter)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "DEFAULT_DATACENTER",
    "FanoutMode",
    "NodeConfig",
    "ReplicationFactor",
    "check_place_name",
    "node_url",
]

FanoutMode = Literal["async", "sync", "speculative"]

DEFAULT_DATACENTER = (
    "dc1"  # a member's datacenter when none is given: one datacenter, as before there were any
)
# A zone's or a datacenter's name: it goes in flags (``dc1:3,dc2:2``), JSON and tables as it is.
_PLACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def check_place_name(kind: str, name: str) -> str:
    """``name`` if it may name a zone or a datacenter (``kind`` says which), else ValueError with one line.

    >>> check_place_name("datacenter", "eu-west-1")
    'eu-west-1'
    """
    if not _PLACE_NAME.fullmatch(name):
        raise ValueError(
            f"a {kind} name is 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit; "
            f"got {name[:40]!r}"
        )
    return name


@dataclass(frozen=True, slots=True)
class ReplicationFactor:
    """N, how many members of a datacenter hold each key: the same in every datacenter (``every``; 0: not
    given, which a new cluster takes as the number of its first members in each), or one for each
    datacenter named (``by_datacenter``, in name order; one not named holds no copies), as
    ``--replication-factor 3`` and ``--replication-factor dc1:3,dc2:2`` say it (Cassandra's
    NetworkTopologyStrategy options).

    >>> both = ReplicationFactor.parse("dc2:2,dc1:3")
    >>> both, str(both), both.of("dc2"), both.of("dc3")
    (ReplicationFactor(every=0, by_datacenter=(('dc1', 3), ('dc2', 2))), 'dc1:3,dc2:2', 2, 0)
    >>> ReplicationFactor.parse("3").of("anywhere"), ReplicationFactor.parse("3").to_json()
    (3, 3)
    """

    every: int = 0
    by_datacenter: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.every < 0 or (self.every and self.by_datacenter):
            raise ValueError("a replication factor is one N for every datacenter, or one N a datacenter")
        names = [name for name, _ in self.by_datacenter]
        if names != sorted(set(names)):
            raise ValueError("a replication factor names each datacenter once, in name order")
        for name, n in self.by_datacenter:
            check_place_name("datacenter", name)
            if n < 0:
                raise ValueError(f"datacenter {name}'s replication factor is negative: {n}")
        if self.by_datacenter and not any(n for _, n in self.by_datacenter):
            raise ValueError("a replication factor keeps at least one copy of each key somewhere")

    @classmethod
    def parse(cls, text: str) -> ReplicationFactor:
        """``N`` (every datacenter; 0: not given) or ``DC:N,DC:N,...``; ValueError with one line."""
        text = text.strip()
        if ":" not in text:
            if not text.isascii() or not text.isdigit() or len(text) > 6:
                raise ValueError(f"a replication factor is N or DC:N,DC:N,...; got {text[:40]!r}")
            return cls(int(text))
        counts: dict[str, int] = {}
        for part in text.split(","):
            name, _, n = part.strip().partition(":")
            if not n.isascii() or not n.isdigit() or len(n) > 6:
                raise ValueError(f"a replication factor is N or DC:N,DC:N,...; got {part.strip()[:40]!r}")
            if name in counts:
                raise ValueError(f"the replication factor names datacenter {name} twice")
            counts[check_place_name("datacenter", name)] = int(n)
        return cls(by_datacenter=tuple(sorted(counts.items())))

    def __bool__(self) -> bool:
        """Whether it was given (``every`` 0 was not)."""
        return bool(self.every or self.by_datacenter)

    def __str__(self) -> str:
        if self.by_datacenter:
            return ",".join(f"{name}:{n}" for name, n in self.by_datacenter)
        return str(self.every)

    def of(self, datacenter: str) -> int:
        """N in ``datacenter`` (0: none there, or ``every`` not given)."""
        return dict(self.by_datacenter).get(datacenter, 0) if self.by_datacenter else self.every

    def to_json(self) -> int | dict[str, int]:
        """An int (the same N everywhere), or an object of each datacenter's N."""
        return dict(self.by_datacenter) if self.by_datacenter else self.every

    @classmethod
    def from_json(cls, value: object) -> ReplicationFactor:
        """What :meth:`to_json` wrote; ValueError for anything else."""
        if type(value) is int:
            return cls(value)
        if isinstance(value, dict) and all(type(n) is int for n in value.values()):
            return cls(by_datacenter=tuple(sorted((str(name), n) for name, n in value.items())))
        raise ValueError(f"not a replication factor: {value!r}")

    @classmethod
    def default_for(cls, members: Mapping[str, int]) -> ReplicationFactor:
        """What a new cluster takes when none is given: every member of a datacenter holds each key, from
        ``members`` (each datacenter's first members). One N when they are the same everywhere."""
        counts = set(members.values())
        if len(counts) == 1:
            return cls(counts.pop())
        return cls(by_datacenter=tuple(sorted(members.items())))

    def check(self, members: Mapping[str, int]) -> None:
        """ValueError (one line) unless this factor fits ``members`` (each datacenter's members): it names
        exactly the datacenters with members (a misspelt one would leave a datacenter without copies),
        and no datacenter's N exceeds its members.

        >>> ReplicationFactor.parse("dc1:3,dc3:3").check({"dc1": 3})
        Traceback (most recent call last):
        ...
        ValueError: the replication factor names dc3, which has no members (the datacenters are dc1)
        """
        if self.by_datacenter:
            named = {name for name, _ in self.by_datacenter}
            strangers, left_out = sorted(named - set(members)), sorted(set(members) - named)
            if strangers or left_out:
                parts = [f"names {', '.join(strangers)}, which has no members"] if strangers else []
                parts += [f"leaves out {', '.join(left_out)}"] if left_out else []
                raise ValueError(
                    f"the replication factor {', and '.join(parts)} (the datacenters are "
                    f"{', '.join(sorted(members))})"
                )
        for name, count in sorted(members.items()):
            n = self.of(name)
            if n > count:
                where = f" of datacenter {name}" if len(members) > 1 else ""
                raise ValueError(f"N={n} exceeds the {count} members{where}")
        if not self.by_datacenter and self.every < 1:
            raise ValueError(f"N is at least 1, got {self.every}")


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
    # N: how many members of a datacenter hold each key, stored with the membership at the cluster's first
    # start (a restart with another value keeps the stored one); not given = the number of first members.
    replication_factor: ReplicationFactor = ReplicationFactor()
    # The first members' zones and datacenters, in the order of ``cluster`` (() = a member's zone is its
    # host, its datacenter DEFAULT_DATACENTER); a joining node's own (""= the same defaults).
    zones: tuple[str, ...] = ()
    datacenters: tuple[str, ...] = ()
    zone: str = ""
    datacenter: str = ""
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
    # And with a peer in another datacenter, paced apart (0 = repair_rate): a WAN's bandwidth is its own.
    remote_repair_rate: int = 0
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
        self._check_topology()
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

    def _check_topology(self) -> None:
        for flag, names in (("--zones", self.zones), ("--datacenters", self.datacenters)):
            if names and len(names) != len(self.members):
                raise ValueError(
                    f"{flag} names {len(names)}, and --cluster has {len(self.members)} members: one a "
                    "member, in the order of --cluster"
                )
            if names and self.join:
                raise ValueError(f"{flag} is for first members; a node joining takes --zone and --datacenter")
        for flag, name in (("--zone", self.zone), ("--datacenter", self.datacenter)):
            if name and not self.join:
                raise ValueError(f"{flag} is for a node joining (with --join); first members take {flag}s")
            if name and self.replace:
                raise ValueError(f"a node replacing a member takes its zone and datacenter: leave out {flag}")
        for name in (*self.zones, self.zone):
            if name:
                check_place_name("zone", name)
        for name in (*self.datacenters, self.datacenter):
            if name:
                check_place_name("datacenter", name)
        given = self.replication_factor
        if given and self.cluster:  # (a node joining has no --cluster: it learns the factor)
            members: dict[str, int] = {}
            for name in self.datacenters or (DEFAULT_DATACENTER,) * len(self.members):
                members[name] = members.get(name, 0) + 1
            try:
                given.check(members)
            except ValueError as error:
                raise ValueError(f"--replication-factor {given}: {error}") from None

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
