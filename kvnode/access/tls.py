"""TLS for a node: the SSL contexts it serves with and connects to its peers with, built from its
configuration (``--tls-cert``, ``--tls-key``, ``--tls-ca``, ``--tls-client-auth``), and a client's.

Both ends verify the other against the cluster's CA. A node connecting to a peer presents its own
certificate, and the replica channel's routes refuse a TLS connection that presented none
(kvnode.replica.channel.server), so only machines the CA signed reach the channel, where the cluster secret's
handshake then proves membership. Clients must present a certificate only with ``--tls-client-auth``
(etcd's ``--client-cert-auth``); without it one that is sent is still verified.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from kvnode.config import NodeConfig

__all__ = ["TlsUnusable", "client_context", "server_context", "verifying_context"]


class TlsUnusable(Exception):
    """A certificate, key or CA file cannot be used: the one-line reason, naming the file."""


def server_context(config: NodeConfig) -> ssl.SSLContext | None:
    """The context the node serves with (None without TLS)."""
    if config.tls_cert is None or config.tls_key is None or config.tls_ca is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load(context, config.tls_ca, config.tls_cert, config.tls_key)
    context.verify_mode = ssl.CERT_REQUIRED if config.tls_client_auth else ssl.CERT_OPTIONAL
    return context


def client_context(config: NodeConfig) -> ssl.SSLContext | None:
    """The context the node connects to its peers with, presenting its own certificate (None without
    TLS)."""
    if config.tls_ca is None:
        return None
    return verifying_context(config.tls_ca, config.tls_cert, config.tls_key)


def verifying_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A client's context: verifies the server's certificate and host name against ``ca``, and presents
    ``cert`` (with ``key``) when given."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    _load(context, ca, cert, key)
    return context


def _load(context: ssl.SSLContext, ca: Path, cert: Path | None, key: Path | None) -> None:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        try:
            context.load_cert_chain(cert, key)
        except OSError as error:
            reason = _reason(error)
            raise TlsUnusable(f"cannot use the certificate {cert} with the key {key}: {reason}") from None
    try:
        context.load_verify_locations(cafile=ca)
    except OSError as error:
        raise TlsUnusable(f"cannot use the CA file {ca}: {_reason(error)}") from None


def _reason(error: OSError) -> str:
    if isinstance(error, ssl.SSLError):
        return str(error.reason or error)
    return error.strerror or str(error)
