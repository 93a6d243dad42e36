"""The shape of a local cluster: how many nodes, and each node's configuration on given ports."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvnode.config import NodeConfig, node_url
from kvnode.ops.certs import ClusterCertificates

__all__ = ["ClusterConfig", "cluster_configs"]


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """A local cluster: ``nodes`` processes on consecutive ports from ``node.port``."""

    nodes: int = 3
    node: NodeConfig = field(default_factory=NodeConfig)
    tls: bool = False  # the launcher makes a throwaway CA and each node's certificate (kvnode.ops.certs)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {self.nodes}")
        if self.node.port + self.nodes - 1 > 65535:
            raise ValueError(f"ports {self.node.port}..{self.node.port + self.nodes - 1} run past 65535")

    @property
    def certificates(self) -> ClusterCertificates:
        """Where ``tls`` keeps the CA and the nodes' certificates: DATA_DIR/tls."""
        return ClusterCertificates(self.node.data_dir / "tls")

    def node_configs(self) -> list[NodeConfig]:
        """Each node's configuration; with ``tls``, each serves with its own certificate, node-PORT.pem."""
        ports = range(self.node.port, self.node.port + self.nodes)
        if not self.tls:
            return cluster_configs(self.node, ports)
        ca = self.certificates.ca
        # Any certificate makes the URLs https://; then each node is given its own.
        configs = cluster_configs(dataclasses.replace(self.node, tls_cert=ca, tls_key=ca, tls_ca=ca), ports)
        own = [self.certificates.node(f"node-{config.port}") for config in configs]
        return [
            dataclasses.replace(config, tls_cert=node.cert, tls_key=node.key)
            for config, node in zip(configs, own, strict=True)
        ]


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
