"""The shape of a local cluster: how many nodes, and each node's configuration on given ports."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kvnode.config import NodeConfig, ReplicationFactor, node_url
from kvnode.ops.certs import ClusterCertificates
from kvnode.storage.keyspace import StorageUnavailable
from kvnode.storage.system_db import SystemDb
from kvnode.topology.membership import Membership

__all__ = [
    "ClusterConfig",
    "cluster_configs",
    "machine_host",
    "machine_placement",
    "member_configs",
    "modelled_places",
    "stored_membership",
]


_MACHINES_REPLICATION = 3  # cluster --machines: every key on three machines, however many there are


def machine_host(index: int) -> str:
    """The loopback address that models machine ``index`` (from 0) of a local cluster: 127.0.0.1, .2..."""
    return f"127.0.0.{index + 1}"


def modelled_places(
    units: int, datacenters: int, zones_per_datacenter: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The zone and the datacenter of each of ``units`` machines (or nodes) of a modelled cluster, as
    --zones and --datacenters list them: ``datacenters`` runs of them, dc1, dc2, ..., and in each its
    machines dealt to zones z1 to z``zones_per_datacenter`` in turn; () for what is not modelled (0).

    >>> modelled_places(6, 2, 2)
    (('z1', 'z2', 'z1', 'z1', 'z2', 'z1'), ('dc1', 'dc1', 'dc1', 'dc2', 'dc2', 'dc2'))
    """
    runs = [unit * datacenters // units for unit in range(units)] if datacenters else [0] * units
    dcs = tuple(f"dc{run + 1}" for run in runs) if datacenters else ()
    if not zones_per_datacenter:
        return (), dcs
    starts = {run: runs.index(run) for run in set(runs)}
    zones = tuple(f"z{(unit - starts[run]) % zones_per_datacenter + 1}" for unit, run in enumerate(runs))
    return zones, dcs


def machine_placement(
    per_machine: int, replication_factor: int, datacenters: int = 0, zones_per_datacenter: int = 0
) -> Callable[[int, NodeConfig, list[int]], NodeConfig]:
    """A ``configure`` for :func:`kvnode.ops.local_cluster.start_local_cluster` that models machines on
    loopback as ``cluster --machines`` does: node i on machine ``i // per_machine`` (:func:`machine_host`),
    every member named at its machine's address, the cluster's replication factor ``replication_factor``
    (in each datacenter), the machines in ``datacenters`` and ``zones_per_datacenter`` (0: not modelled;
    :func:`modelled_places`).

    >>> place = machine_placement(2, 3)
    >>> base = NodeConfig(port=9002, cluster=("http://127.0.0.1:9001", "http://127.0.0.1:9002",
    ...                                       "http://127.0.0.1:9003"))
    >>> placed = place(1, base, [])
    >>> placed.host, placed.cluster, str(placed.replication_factor)
    ('127.0.0.1', ('http://127.0.0.1:9001', 'http://127.0.0.1:9002', 'http://127.0.0.2:9003'), '3')
    >>> machine_placement(1, 1, datacenters=3)(1, base, []).datacenters
    ('dc1', 'dc2', 'dc3')
    """

    def place(index: int, config: NodeConfig, _spare: list[int]) -> NodeConfig:
        ports = [urlsplit(url).port or 0 for url in config.cluster]
        urls = tuple(node_url(machine_host(i // per_machine), port) for i, port in enumerate(ports))
        host = machine_host(index // per_machine)
        machines = (len(urls) + per_machine - 1) // per_machine
        zones, dcs = modelled_places(machines, datacenters, zones_per_datacenter)
        return dataclasses.replace(
            config,
            host=host,
            cluster=urls,
            replication_factor=ReplicationFactor(replication_factor),
            zones=tuple(zones[i // per_machine] for i in range(len(urls))) if zones else (),
            datacenters=tuple(dcs[i // per_machine] for i in range(len(urls))) if dcs else (),
        )

    return place


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """A local cluster: ``nodes`` processes on consecutive ports from ``node.port``; or, with ``machines``,
    that many machines modelled on loopback (127.0.0.1, 127.0.0.2, ...: distinct hosts to placement), each
    running ``per_machine`` members (0: one per core) on the ports after ``node.port``, which they share
    for clients (SO_REUSEPORT), so a client needs one URL per machine. A cluster of machines has a
    replication factor of 3 unless ``node.replication_factor`` says otherwise (fewer with fewer members):
    it models a cluster that grows by adding room, not copies. ``model_datacenters`` and ``model_zones``
    (zones a datacenter) model where the machines (or nodes) are (:func:`modelled_places`; 0: not)."""

    nodes: int = 3
    node: NodeConfig = field(default_factory=NodeConfig)
    tls: bool = False  # the launcher makes a throwaway CA and each node's certificate (kvnode.ops.certs)
    machines: int = 0
    per_machine: int = 0
    model_datacenters: int = 0
    model_zones: int = 0

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {self.nodes}")
        last = self.node.port + (self.members_per_machine if self.machines else self.nodes - 1)
        if last > 65535:
            raise ValueError(f"ports {self.node.port}..{last} run past 65535")
        if self.machines:
            if not 0 < self.machines < 255:
                raise ValueError(f"--machines must be between 1 and 254, got {self.machines}")
            if self.tls:
                raise ValueError("--machines runs plain http:// only for now; leave out --tls")
            if self.node.host != NodeConfig().host:
                raise ValueError(
                    "--machines models its machines at 127.0.0.1, 127.0.0.2, ...: leave out --host"
                )
        units = self.machines or self.nodes
        if self.model_datacenters > units:
            raise ValueError(
                f"--model-datacenters {self.model_datacenters} exceeds the {units} machines (or nodes)"
            )

    @property
    def members_per_machine(self) -> int:
        return self.per_machine or os.cpu_count() or 1

    def client_urls(self) -> list[str]:
        """Where clients reach the cluster: each machine's shared port, or each node."""
        if not self.machines:
            return [config.url for config in self.node_configs()]
        return [node_url(machine_host(index), self.node.port) for index in range(self.machines)]

    @property
    def certificates(self) -> ClusterCertificates:
        """Where ``tls`` keeps the CA and the nodes' certificates: DATA_DIR/tls."""
        return ClusterCertificates(self.node.data_dir / "tls")

    def node_configs(self, ports: Sequence[int] = (), members: tuple[str, ...] = ()) -> list[NodeConfig]:
        """Each node's configuration, on ``ports`` (by default ``nodes`` consecutive ones from the first),
        given ``members`` as its --cluster (by default their URLs); with ``tls``, each serves with its own
        certificate, node-PORT.pem."""
        if self.machines and not ports:
            return self._machine_configs(members)
        ports = ports or range(self.node.port, self.node.port + self.nodes)
        base = self.node
        if self.tls:  # any certificate makes the URLs https://; then each node is given its own
            ca = self.certificates.ca
            base = dataclasses.replace(base, tls_cert=ca, tls_key=ca, tls_ca=ca)
        configs = cluster_configs(base, ports)
        if members:
            configs = [dataclasses.replace(config, cluster=members) for config in configs]
        else:
            configs = self._modelled(configs, 1)
        if not self.tls:
            return configs
        own = [self.certificates.node(f"node-{config.port}") for config in configs]
        return [
            dataclasses.replace(config, tls_cert=node.cert, tls_key=node.key)
            for config, node in zip(configs, own, strict=True)
        ]

    def _machine_configs(self, members: tuple[str, ...] = ()) -> list[NodeConfig]:
        """Each machine's members, machine by machine: ports node.port+1... at its address, sharing
        node.port for clients, data in DATA_DIR/node-HOST-PORT."""
        ports = range(self.node.port + 1, self.node.port + 1 + self.members_per_machine)
        places = [(machine_host(index), port) for index in range(self.machines) for port in ports]
        urls = members or tuple(node_url(host, port) for host, port in places)
        configs = [self.machine_member(host, port, urls) for host, port in places]
        return configs if members else self._modelled(configs, self.members_per_machine)

    def _modelled(self, configs: list[NodeConfig], per_unit: int) -> list[NodeConfig]:
        """The first members' ``configs``, ``per_unit`` a machine (or node), in the datacenters and zones
        modelled (each given the lists); as they are when none are."""
        units = len(configs) // per_unit
        zones, dcs = modelled_places(units, self.model_datacenters, self.model_zones)
        if not (zones or dcs):
            return configs
        zones = tuple(zone for zone in zones for _ in range(per_unit))
        dcs = tuple(dc for dc in dcs for _ in range(per_unit))
        replication = self.node.replication_factor
        if self.machines and not replication:  # three copies in each datacenter, or fewer with fewer
            smallest = min(dcs.count(dc) for dc in set(dcs)) if dcs else len(configs)
            replication = ReplicationFactor(min(_MACHINES_REPLICATION, smallest))
        return [
            dataclasses.replace(config, zones=zones, datacenters=dcs, replication_factor=replication)
            for config in configs
        ]

    def _machines_replication(self, members: int) -> ReplicationFactor:
        return self.node.replication_factor or ReplicationFactor(min(_MACHINES_REPLICATION, members))

    def machine_member(self, host: str, port: int, members: tuple[str, ...]) -> NodeConfig:
        """The member at HOST:PORT of a machine, sharing node.port for clients, data in
        DATA_DIR/node-HOST-PORT, given ``members`` as --cluster."""
        return dataclasses.replace(
            self.node,
            host=host,
            port=port,
            client_port=self.node.port if port != self.node.port else None,
            data_dir=self.node.data_dir / f"node-{host}-{port}",
            cluster=members,
            replication_factor=self._machines_replication(len(members)),
        )


def stored_membership(data_dir: Path) -> Membership | None:
    """The newest membership stored in the node dirs of a cluster's data dir (DATA_DIR/node-*), None when
    none holds one (a new cluster). The nodes must be stopped: each system database is opened here."""
    newest: Membership | None = None
    for node_dir in sorted(data_dir.glob("node-*")):
        if not (node_dir / "system").is_dir():
            continue
        try:
            system = SystemDb.open(node_dir)
        except StorageUnavailable:
            continue
        try:
            stored = system.membership.load()
        except ValueError:
            stored = None
        finally:
            system.close()
        if stored is not None and (newest is None or stored.version > newest.version):
            newest = stored
    return newest


def member_configs(config: ClusterConfig, membership: Membership) -> tuple[list[NodeConfig], list[str]]:
    """The members of a stored membership this launcher runs (those at its host, each in
    DATA_DIR/node-PORT, given the members as --cluster; with ``machines``, those at a loopback address,
    each in DATA_DIR/node-HOST-PORT), and the members it does not run."""
    if config.machines:
        return _machine_members(config, membership)
    prefix = node_url(config.node.host, 0, config.node.tls or config.tls).removesuffix("0")
    ports = [url.removeprefix(prefix) for url in membership.urls]
    ours = [
        int(port) for url, port in zip(membership.urls, ports, strict=True) if url != port and port.isdigit()
    ]
    others = [
        url for url, port in zip(membership.urls, ports, strict=True) if url == port or not port.isdigit()
    ]
    return config.node_configs(ours, membership.urls), others


def _machine_members(config: ClusterConfig, membership: Membership) -> tuple[list[NodeConfig], list[str]]:
    ours, others = [], []
    for url in membership.urls:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
        if parts.scheme != "http" or port is None or not host.startswith("127."):
            others.append(url)
            continue
        ours.append(config.machine_member(host, port, membership.urls))
    return ours, others


def cluster_configs(
    base: NodeConfig, ports: Sequence[int], data_dirs: Sequence[Path] | None = None
) -> list[NodeConfig]:
    """The nodes of one cluster on ``ports`` (any ports; ClusterConfig's are consecutive): every node is
    given the same list, in the order of ``ports``; node i keeps its data in ``data_dirs[i]``, by default
    ``base.data_dir / node-PORT``."""
    urls = tuple(node_url(base.host, port, base.tls) for port in ports)
    dirs = data_dirs or [base.data_dir / f"node-{port}" for port in ports]
    return [
        dataclasses.replace(base, port=port, data_dir=data_dir, cluster=urls)
        for port, data_dir in zip(ports, dirs, strict=True)
    ]
