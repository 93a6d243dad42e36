"""One JSON request to a node, for ``python -m kvnode admin``, and its failures in words that name the
cause and the fix: a node that does not answer, one whose certificate cannot be verified without
``--tls-ca``, a plain http:// URL for a node that serves HTTPS (the node just closes the connection), a
token missing or without the admin role.

>>> advice_for_status(401, token=None)
': the node requires a client token: pass an admin token with --token-file FILE'
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from kvnode.access.tls import verifying_context

__all__ = ["Refused", "Unreachable", "advice_for_status", "fetch"]

_TIMEOUT_S = 10.0  # the node itself waits up to its replica timeout for connect attempts
_PROBE_S = 3.0  # for the TLS handshake that tells whether an http:// URL's node serves HTTPS


class Unreachable(Exception):
    """The node could not be asked, or answered with an error; the message says why and what to do."""


class Refused(Exception):
    """The node refused the change, or its argument; the message is its reason."""


def fetch(
    url: str,
    token: str | None,
    tls_ca: Path | None,
    path: str = "/v0/cluster",
    method: str = "GET",
    member: bool = False,
) -> dict[str, Any]:
    """The node's JSON answer; raises Refused (a 400 or a 409: the body says why) or Unreachable.
    ``member``: the URL is a member's, as a node named it, not the one given: a refusal gives no advice
    about ``--url``."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    context = None if tls_ca is None else verifying_context(tls_ca)
    try:
        request = urllib.request.Request(url + path, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=context) as reply:
            view: dict[str, Any] = json.loads(reply.read())
    except urllib.error.HTTPError as error:
        if error.code in (400, 409):
            raise Refused(error.read().decode("utf-8", "replace").strip()) from None
        advice = advice_for_status(error.code, token)
        raise Unreachable(f"{method} {url}{path} answered {error.code} {error.reason}{advice}") from None
    except urllib.error.URLError as error:
        raise Unreachable(_unreachable(url, error.reason, tls_ca, member)) from None
    except ConnectionError as error:  # closed without an answer: what a TLS node does to plain HTTP
        if url.startswith("http://") and _serves_https(url):
            https = "https://" + url.removeprefix("http://")
            raise Unreachable(f"{url} serves HTTPS: use --url {https}, with --tls-ca FILE") from None
        raise Unreachable(f"cannot read {url}{path}: {error}") from None
    except (OSError, ValueError) as error:  # a timeout, a body that is not JSON
        raise Unreachable(f"cannot read {url}{path}: {error}") from None
    return view


def advice_for_status(status: int, token: str | None) -> str:
    """What to do about an error status, as the end of its line ("" for a status this cannot help)."""
    if status == 401 and token is None:
        return ": the node requires a client token: pass an admin token with --token-file FILE"
    if status == 401:
        return ": the node knows no such token: check the file given to --token-file"
    if status == 403:
        return ": the token's role is not admin: pass an admin token with --token-file FILE"
    return ""


def _unreachable(url: str, reason: object, tls_ca: Path | None, member: bool) -> str:
    if isinstance(reason, ssl.SSLCertVerificationError):
        why = reason.verify_message or reason
        if tls_ca is None:
            return f"cannot verify {url}'s certificate ({why}): pass the cluster's CA with --tls-ca FILE"
        return f"cannot verify {url}'s certificate against {tls_ca} ({why}): is it the cluster's CA?"
    if isinstance(reason, ssl.SSLError) and reason.reason == "WRONG_VERSION_NUMBER":
        return f"{url} does not serve HTTPS: use http:// in --url"
    if isinstance(reason, ConnectionRefusedError):
        if member:
            return f"cannot reach {url}: connection refused"
        return f"cannot reach {url}: connection refused: check --url (or KVNODE_URL), and that the node runs"
    return f"cannot reach {url}: {reason}"


def _serves_https(url: str) -> bool:
    """Whether a TLS handshake with the URL's host and port succeeds (the certificate is not checked:
    this only decides what to advise)."""
    parts = urllib.parse.urlsplit(url)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((parts.hostname or "", parts.port or 80), timeout=_PROBE_S) as raw,
            context.wrap_socket(raw),
        ):
            return True
    except OSError:  # ssl.SSLError is one
        return False
