"""A throwaway CA and one node's certificate (kvnode.ops.certs, with openssl), made once for the TLS tests
of this package."""

from __future__ import annotations

import pytest

from kvnode.ops.certs import ClusterCertificates, NodeCertificate


@pytest.fixture(scope="session")
def node_certificate(tmp_path_factory: pytest.TempPathFactory) -> NodeCertificate:
    certificates = ClusterCertificates(tmp_path_factory.mktemp("certs"))
    certificates.make(["node"])
    return certificates.node("node")
