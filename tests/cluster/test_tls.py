"""TLS end to end on real nodes, certificates made as ``cluster --tls`` makes them: a 3-node cluster
serves https:// only and replicates over TLS; a client that trusts another CA is refused, and so is a
plain-HTTP client; the replica channel takes only a peer whose certificate the cluster's CA signed, so a
node with another CA's certificate cannot join even holding the cluster secret; with --tls-client-auth a
client without a certificate gets nothing; connections that never begin the TLS handshake are closed by
the header timeout."""

from __future__ import annotations

import asyncio
import http.client
import resource
import selectors
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvnode.access.tls import verifying_context
from kvnode.config import NodeConfig
from kvnode.ops.certs import ClusterCertificates, NodeCertificate
from kvnode.replica.channel.handshake import ClusterAuth
from kvnode.replica.errors import ReplicaUnavailable
from kvnode.replica.peer import PeerReplica
from kvnode.storage.records import Record
from kvnode.topology.membership import cluster_identity
from tests.harness import (
    Cluster,
    ClusterFactory,
    assert_exit_2_with_one_line,
    fresh_key,
    launch_cluster,
    needs_openssl,
    request,
    rss_kib,
    wait_for,
)

SECRET = "a cluster secret of more than enough bytes"

pytestmark = needs_openssl


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[NodeCertificate, NodeCertificate]:
    """The cluster's certificate, and a rogue's from another CA (both for 127.0.0.1)."""
    ours, theirs = (ClusterCertificates(tmp_path_factory.mktemp(name)) for name in ("ours", "theirs"))
    ours.make(["node"])
    theirs.make(["rogue"])
    return ours.node("node"), theirs.node("rogue")


def tls_options(certificate: NodeCertificate) -> dict[str, Path]:
    return {"tls_cert": certificate.cert, "tls_key": certificate.key, "tls_ca": certificate.ca}


def as_member(certificate: NodeCertificate) -> ssl.SSLContext:
    """A context trusting the certificate's CA and presenting the certificate."""
    return verifying_context(certificate.ca, certificate.cert, certificate.key)


def a_record() -> Record:
    return Record.put(time.time_ns() // 1000, b"x")


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, certificates: tuple[NodeCertificate, NodeCertificate]
) -> Iterator[Cluster]:
    options = tls_options(certificates[0])
    nodes = launch_cluster(tmp_path_factory.mktemp("tls"), 3, cluster_secret=SECRET, **options)  # type: ignore[arg-type]
    try:
        yield nodes
    finally:
        nodes.stop()


def test_a_tls_cluster_serves_https_and_replicates(
    cluster: Cluster, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    ca = verifying_context(certificates[0].ca)
    assert all(url.startswith("https://127.0.0.1:") for url in cluster.urls)
    key = fresh_key("tls")
    params: dict[str, str | int] = {"id": key, "ack": 3}
    assert request(cluster[0].url, "PUT", "/v0/entity", params, body=b"over tls", context=ca).status == 201
    answer = request(cluster[1].url, "GET", "/v0/entity", params, context=ca)
    assert (answer.status, answer.body) == (200, b"over tls")


def test_admin_verifies_the_node_against_the_ca_it_is_given(
    cluster: Cluster, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    def admin(url: str, *tls_ca: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "kvnode", "admin", "--url", url, *tls_ca, "status"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)

    url = cluster[0].url
    trusting = admin(url, "--tls-ca", str(certificates[0].ca))
    assert trusting.returncode == 0 and cluster[2].url in trusting.stdout, trusting.stderr
    # Each failure names its cause and its fix.
    other = assert_exit_2_with_one_line(admin(url, "--tls-ca", str(certificates[1].ca)))
    assert f"cannot verify {url}'s certificate against {certificates[1].ca}" in other
    assert "is it the cluster's CA?" in other
    without = assert_exit_2_with_one_line(admin(url))
    assert f"cannot verify {url}'s certificate" in without
    assert "pass the cluster's CA with --tls-ca FILE" in without
    plain = url.replace("https://", "http://")
    assert assert_exit_2_with_one_line(admin(plain)) == (
        f"kvnode admin: {plain} serves HTTPS: use --url {url}, with --tls-ca FILE\n"
    )


def test_a_client_trusting_another_ca_is_refused(
    cluster: Cluster, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        request(cluster[0].url, "GET", "/v0/status", context=verifying_context(certificates[1].ca))


def test_a_plain_http_client_gets_nothing(cluster: Cluster) -> None:
    plain = cluster[0].url.replace("https://", "http://")
    with pytest.raises((OSError, http.client.HTTPException)):
        request(plain, "GET", "/v0/entity", {"id": "k"})


def test_the_replica_routes_refuse_a_connection_without_a_certificate(
    cluster: Cluster, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    ca = verifying_context(certificates[0].ca)
    answer = request(cluster[0].url, "GET", "/v0/internal/challenge", context=ca)
    assert answer.status == 403 and "certificate" in answer.text


async def test_a_node_with_another_cas_certificate_cannot_join_even_with_the_secret(
    cluster: Cluster, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    ours, theirs = certificates
    ca = verifying_context(ours.ca)
    member = ClusterAuth(
        SECRET.encode(), cluster_identity(cluster.urls), cluster.urls[1]
    )  # passes the handshake
    rogues = {
        "trusting its own CA": as_member(theirs),
        "trusting ours": verifying_context(ours.ca, theirs.cert, theirs.key),
    }
    for rogue, context in rogues.items():
        key = fresh_key("stolen").encode()
        peer = PeerReplica(cluster[0].url, 2.0, auth=member, ssl_context=context)
        try:
            write = await asyncio.gather(peer.write(key, a_record()), return_exceptions=True)
            assert isinstance(write[0], ReplicaUnavailable), (rogue, write)
            # Refused in the TLS handshake; with TLS 1.3 a server's refusal of the client's certificate
            # reaches the client only as a dropped connection.
            assert peer.state in ("refused", "down"), rogue
        finally:
            await peer.close()
        assert request(cluster[0].url, "GET", "/v0/entity", {"id": key.decode()}, context=ca).status == 404
    # The same call from a machine with our CA's certificate is taken: the refusals above were TLS's.
    peer = PeerReplica(cluster[0].url, 2.0, auth=member, ssl_context=as_member(ours))
    try:
        assert await peer.write(fresh_key("allowed").encode(), a_record()) is None
    finally:
        await peer.close()


def test_with_client_auth_a_client_must_present_a_certificate(
    start_cluster: ClusterFactory, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    ours, theirs = certificates
    node = start_cluster(1, tls_client_auth=True, **tls_options(ours))[0]
    for context in (verifying_context(ours.ca), verifying_context(ours.ca, theirs.cert, theirs.key)):
        with pytest.raises((OSError, http.client.HTTPException)):
            request(node.url, "GET", "/v0/status", context=context)
    assert request(node.url, "GET", "/v0/status", context=as_member(ours)).status == 200


SILENT_CONNECTIONS = 2000
HEADER_TIMEOUT_S = 2
CLOSE_MARGIN_S = 15  # beyond the header timeout: accepting 2,000 connections on a loaded machine


def _closed_by_the_server(sockets: list[socket.socket], deadline: float) -> int:
    """How many of ``sockets`` the server closed (an end of stream or a reset) before ``deadline``."""
    closed = 0
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ, sock)
        while closed < len(sockets) and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                sock = key.data
                try:
                    data = sock.recv(4096)
                except ConnectionResetError:
                    data = b""
                assert data == b"", data  # a server that never got a ClientHello has nothing to say
                selector.unregister(sock)
                closed += 1
    return closed


def test_connections_that_never_begin_the_tls_handshake_are_closed_by_the_header_timeout(
    start_cluster: ClusterFactory, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * SILENT_CONNECTIONS:
        pytest.skip(f"the hard descriptor limit here ({hard}) is too low for {SILENT_CONNECTIONS} sockets")
    node = start_cluster(1, header_timeout_s=HEADER_TIMEOUT_S, **tls_options(certificates[0]))[0]
    port = int(node.url.rsplit(":", 1)[1])
    ca = verifying_context(certificates[0].ca)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    silent: list[socket.socket] = []
    try:
        for _ in range(SILENT_CONNECTIONS):  # each connects and never sends a byte
            silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        opened = time.monotonic()
        assert request(node.url, "PUT", "/v0/entity", {"id": "served"}, body=b"v", context=ca).status == 201
        closed = _closed_by_the_server(silent, opened + HEADER_TIMEOUT_S + CLOSE_MARGIN_S)
        last = time.monotonic() - opened
        print(f"{closed} of {SILENT_CONNECTIONS} closed by the node, the last {last:.1f} s after they opened")
        assert closed == SILENT_CONNECTIONS
        assert request(node.url, "GET", "/v0/entity", {"id": "served"}, context=ca).body == b"v"
    finally:
        for sock in silent:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


FLOODS = 3
FLOOD_CONNECTIONS = 400
SETTLED_MIB = 16  # what the floods may leave above the start (before the settler: about 40 MiB, for good)


def test_memory_returns_near_its_start_after_floods_of_connections_that_never_handshake(
    start_cluster: ClusterFactory, certificates: tuple[NodeCertificate, NodeCertificate]
) -> None:
    """Issue 41: each TLS connection left the heap holding its buffers, contexts and aiohttp's objects
    (five floods of 2,000 took a node from 30 to 263 MiB, for good); the settler now gives them back."""
    node = start_cluster(1, header_timeout_s=1, **tls_options(certificates[0]))[0]
    assert node.process is not None
    pid, port = node.process.pid, int(node.url.rsplit(":", 1)[1])
    ca = verifying_context(certificates[0].ca)
    assert request(node.url, "PUT", "/v0/entity", {"id": "before"}, body=b"v", context=ca).status == 201
    baseline = rss_kib(pid)
    for _ in range(FLOODS):
        silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(FLOOD_CONNECTIONS)]
        try:
            assert _closed_by_the_server(silent, time.monotonic() + 1 + CLOSE_MARGIN_S) == FLOOD_CONNECTIONS
        finally:
            for sock in silent:
                sock.close()
    wait_for(lambda: rss_kib(pid) - baseline < SETTLED_MIB * 1024, what="memory back near its start")
    assert request(node.url, "GET", "/v0/entity", {"id": "before"}, context=ca).body == b"v"


def test_a_tls_config_needs_all_three_files_and_https_members(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="go together"):
        NodeConfig(tls_cert=tmp_path / "a.pem", tls_key=tmp_path / "a.key")
    with pytest.raises(ValueError, match="every member's URL is https://"):
        members = ("https://127.0.0.1:8080", "http://127.0.0.1:8081")
        NodeConfig(cluster=members, tls_cert=tmp_path, tls_key=tmp_path, tls_ca=tmp_path)
