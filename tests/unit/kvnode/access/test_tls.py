"""The SSL contexts of kvnode.access.tls, with a throwaway CA's certificate: none without TLS, the client
certificate asked for or required, each end verifying the other, and a file that cannot be used named."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from kvnode.access.tls import TlsUnusable, client_context, server_context, verifying_context
from kvnode.config import NodeConfig
from kvnode.ops.certs import NodeCertificate


def tls_config(tmp_path: Path, files: NodeCertificate, client_auth: bool = False) -> NodeConfig:
    return NodeConfig(
        data_dir=tmp_path,
        tls_cert=files.cert,
        tls_key=files.key,
        tls_ca=files.ca,
        tls_client_auth=client_auth,
    )


def test_without_tls_there_is_no_context(tmp_path: Path) -> None:
    config = NodeConfig(data_dir=tmp_path)
    assert server_context(config) is None and client_context(config) is None


def test_the_server_asks_for_a_client_certificate_and_requires_one_with_client_auth(
    tmp_path: Path, node_certificate: NodeCertificate
) -> None:
    asking = server_context(tls_config(tmp_path, node_certificate))
    requiring = server_context(tls_config(tmp_path, node_certificate, client_auth=True))
    assert asking is not None and requiring is not None
    assert (asking.verify_mode, requiring.verify_mode) == (ssl.CERT_OPTIONAL, ssl.CERT_REQUIRED)
    assert asking.minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_client_context_verifies_the_server_and_its_host_name(node_certificate: NodeCertificate) -> None:
    context = verifying_context(node_certificate.ca)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


async def test_a_peer_connects_presenting_its_certificate_and_both_ends_verify(
    tmp_path: Path, node_certificate: NodeCertificate
) -> None:
    config = tls_config(tmp_path, node_certificate, client_auth=True)
    serving, connecting = server_context(config), client_context(config)
    assert serving is not None and connecting is not None
    presented: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        presented.set_result(writer.get_extra_info("peercert"))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=serving)
    async with server:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=connecting)
        peer_certificate = await asyncio.wait_for(presented, 30)
        writer.close()
    assert isinstance(peer_certificate, dict)
    assert peer_certificate["subject"] == ((("commonName", "kvnode node"),),)


def test_a_missing_certificate_is_named_with_its_key(
    tmp_path: Path, node_certificate: NodeCertificate
) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(TlsUnusable) as refused:
        verifying_context(node_certificate.ca, missing, node_certificate.key)
    message = str(refused.value)
    assert message.startswith(f"cannot use the certificate {missing} with the key {node_certificate.key}: ")
    assert "\n" not in message


def test_a_ca_file_that_holds_no_certificate_is_named(tmp_path: Path) -> None:
    not_a_ca = tmp_path / "ca.pem"
    not_a_ca.write_text("not a certificate\n")
    with pytest.raises(TlsUnusable, match=f"^cannot use the CA file {not_a_ca}: "):
        verifying_context(not_a_ca)
