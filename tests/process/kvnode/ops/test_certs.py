"""kvnode.ops.certs: a throwaway CA and node certificates made with openssl, that a TLS client trusting the
CA accepts for 127.0.0.1, ::1 and localhost, with keys readable by their owner only; made once and kept;
a missing or failing openssl is one line."""

from __future__ import annotations

import ssl
import types
from pathlib import Path

import pytest

from kvnode.ops import certs
from kvnode.ops.certs import CertificatesUnavailable, ClusterCertificates


def handshake(node: certs.NodeCertificate, name: str) -> None:
    """A TLS handshake in memory: the node serves its certificate, a client trusting the CA checks it for
    ``name``; raises ssl.SSLError when the certificate does not pass."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(node.cert, node.key)
    client = ssl.create_default_context(cafile=node.ca)
    pipes = [ssl.MemoryBIO() for _ in range(4)]  # client to server, server to client, for each end
    client_end = client.wrap_bio(pipes[0], pipes[1], server_hostname=name)
    server_end = server.wrap_bio(pipes[1], pipes[0], server_side=True)
    done = [False, False]
    for _ in range(10):
        for index, end in enumerate((client_end, server_end)):
            try:
                end.do_handshake()
                done[index] = True
            except ssl.SSLWantReadError:
                pass
        if all(done):
            return
    raise AssertionError("the handshake did not finish")


def test_node_certificates_pass_for_the_loopback_names_and_keys_are_private(tmp_path: Path) -> None:
    made = ClusterCertificates(tmp_path / "tls")
    made.make(["node-9000", "node-9001"])
    for name in ("node-9000", "node-9001"):
        node = made.node(name)
        assert node.ca == made.ca == tmp_path / "tls" / "ca.pem"
        for host in ("127.0.0.1", "::1", "localhost"):
            handshake(node, host)
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            handshake(node, "example.com")
        assert node.key.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "tls" / "ca.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "tls").stat().st_mode & 0o777 == 0o700


def test_certificates_are_made_once_and_kept(tmp_path: Path) -> None:
    made = ClusterCertificates(tmp_path)
    made.make(["node-1"])
    kept = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    made.make(["node-1", "node-2"])
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir() if path.name in kept} == kept
    handshake(made.node("node-2"), "localhost")  # signed by the kept CA


def test_without_openssl_or_when_it_fails_the_reason_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(certs, "shutil", types.SimpleNamespace(which=lambda name: None))
    with pytest.raises(CertificatesUnavailable) as missing:
        ClusterCertificates(tmp_path / "a").make(["node-1"])
    assert str(missing.value) == "--tls needs the openssl command, which is not on the PATH"
    failing = tmp_path / "openssl"
    failing.write_text("#!/bin/sh\necho 'first line' >&2\necho 'req: cannot write the key' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setattr(certs, "shutil", types.SimpleNamespace(which=lambda name: str(failing)))
    with pytest.raises(CertificatesUnavailable) as failed:
        ClusterCertificates(tmp_path / "b").make(["node-1"])
    assert str(failed.value) == "openssl could not make a certificate: req: cannot write the key"
