"""A throwaway CA and a certificate for each node of a local cluster, made with the ``openssl`` command
(``cluster --tls``): enough to run a cluster over TLS on this machine, not to guard a network.

Each node's certificate names 127.0.0.1, ::1 and localhost, and is also the node's client certificate on
the replica channel. The files stay for the next start (clients keep trusting the same CA); keys are
readable by their owner only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CertificatesUnavailable", "ClusterCertificates", "NodeCertificate"]

_DAYS = "365"
_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-noenc"]
_NAMES = "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"


class CertificatesUnavailable(Exception):
    """openssl is missing or failed: the one-line reason."""


@dataclass(frozen=True, slots=True)
class NodeCertificate:
    """Where one node's certificate, its key and the CA's certificate are."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True, slots=True)
class ClusterCertificates:
    """The CA and node certificates kept in ``directory``: ca.pem, ca.key, NAME.pem, NAME.key."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def node(self, name: str) -> NodeCertificate:
        return NodeCertificate(self.directory / f"{name}.pem", self.directory / f"{name}.key", self.ca)

    def make(self, names: Iterable[str]) -> None:
        """Make the CA and each named node's certificate, unless they exist."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        ca_key = self.directory / "ca.key"
        if not self.ca.exists():
            _openssl(
                ["req", "-x509", *_NEW_KEY, "-keyout", str(ca_key), "-out", str(self.ca), "-days", _DAYS],
                ["-subj", "/CN=kvnode throwaway CA", "-addext", "basicConstraints=critical,CA:TRUE"],
                ["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            )
        for name in names:
            node = self.node(name)
            if node.cert.exists():
                continue
            _openssl(
                ["req", "-x509", *_NEW_KEY, "-keyout", str(node.key), "-out", str(node.cert), "-days", _DAYS],
                ["-CA", str(self.ca), "-CAkey", str(ca_key), "-subj", f"/CN=kvnode {name}"],
                ["-addext", _NAMES, "-addext", "basicConstraints=critical,CA:FALSE"],
            )


def _openssl(*arguments: list[str]) -> None:
    command = shutil.which("openssl")
    if command is None:
        raise CertificatesUnavailable("--tls needs the openssl command, which is not on the PATH")
    argv = [command, *(argument for part in arguments for argument in part)]
    old_mask = os.umask(0o077)  # keys are written readable by their owner only
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    finally:
        os.umask(old_mask)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise CertificatesUnavailable(f"openssl could not make a certificate: {last}")
