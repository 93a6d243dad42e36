"""Who may use a replica channel: a mutual proof that both ends hold the cluster secret, for this cluster
(its identity, kvnode.topology.membership: not its member list, so members at different membership versions,
and a node joining, still talk). The secret itself never travels. Each end also
introduces itself (:class:`Introduction`): its identity, the identity it remembered for the other end
(with the one that replaced), which is how a member whose disk was lost learns so
(kvnode.healing.rebuild_state), the membership version it runs with, and the replica protocol versions it
speaks (kvnode.replica.channel.protocol: both ends use the highest they share).

The handshake, on one TCP connection before the WebSocket upgrade:

1. the client asks ``GET /v0/internal/challenge``; the server answers a fresh nonce (single use, expires);
2. the client's upgrade request names itself (its URL in the cluster list), the server it means, its own
   nonce, the server's nonce, its introduction, and its proof: HMAC-SHA256(secret, version | "client" |
   cluster identity | both URLs | both nonces | its introduction);
3. the server checks the client is another node, that it is the node meant, takes the nonce and
   checks the proof; it answers 403 before the upgrade, or 101 carrying its own introduction and proof
   (role "server", covering both introductions), which the client checks in turn.

The protocol ranges are covered by the server's proof only: the client's proof is as a kvnode from before
versions were negotiated makes it, so such a server admits a newer client, and a server that says no range
(one from before) proves itself as it always did. A range taken out or changed on the way fails the
server's proof, so neither end can be talked down to an older version.

Without a secret there is no challenge and no proof: the upgrade request names the client and carries its
introduction, and the 101 the server's, as plain headers.

    >>> a = ClusterAuth(b"s" * 32, "cluster-1", "http://a:1")
    >>> b = ClusterAuth(b"s" * 32, "cluster-1", "http://b:1")
    >>> headers, expected = a.upgrade_headers("http://b:1", b.issue_nonce(), Introduction("a" * 32))
    >>> client, introduction = b.admit(headers)
    >>> answer = b.answer_headers(headers, Introduction("b" * 32, introduction.identity))
    >>> client, server_proof_ok(answer, expected)
    ('http://a:1', True)
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kvnode.replica.channel.protocol import Versions

__all__ = [
    "CHALLENGE_PATH",
    "CLIENT_HEADER",
    "MIN_SECRET_BYTES",
    "PROOF_HEADER",
    "SECRET_ADVICE",
    "AuthError",
    "ClusterAuth",
    "ExpectedProof",
    "Introduction",
    "RateLimitedLog",
    "create_secret_file",
    "server_proof_ok",
]

PROOF_FORMAT = "1"  # how a proof is made; not the replica protocol's version, which is negotiated
CHALLENGE_PATH = "/v0/internal/challenge"
MIN_SECRET_BYTES = 16
CLIENT_HEADER = "X-Kvnode-Client"
SERVER_HEADER = "X-Kvnode-Server"
CLIENT_NONCE_HEADER = "X-Kvnode-Client-Nonce"
SERVER_NONCE_HEADER = "X-Kvnode-Server-Nonce"
PROOF_HEADER = "X-Kvnode-Proof"
IDENTITY_HEADER = "X-Kvnode-Identity"
REMEMBERED_HEADER = "X-Kvnode-Remembered"
REPLACED_HEADER = "X-Kvnode-Replaced"
MEMBERSHIP_HEADER = "X-Kvnode-Membership-Version"
PROTOCOLS_HEADER = "X-Kvnode-Protocols"
_IDENTITY = re.compile("[0-9a-f]{32}")  # kvnode.storage.system_db.NodeIdentity's: 16 random bytes in hex
NONCE_TTL_S = 10.0
MAX_NONCES = 4096  # challenges outstanding at once; the oldest is forgotten beyond
# How to fix a handshake refused for the secret, said by both ends.
SECRET_ADVICE = (
    "give every node the same secret with --cluster-secret-file FILE or KVNODE_CLUSTER_SECRET "
    "(a cluster started by `python -m kvnode` keeps its secret in DATA_DIR/cluster.secret)"
)


class AuthError(Exception):
    """A peer failed the handshake; the message says why (never the secret), ``advice`` how to fix it.
    The advice goes in this node's log only: the refused peer adds its own to what it logs."""

    def __init__(self, reason: str, advice: str = "") -> None:
        super().__init__(reason)
        self.advice = advice


@dataclass(frozen=True, slots=True)
class Introduction:
    """What one end of a replica handshake says of itself: its identity, the identity it remembered for
    the other end's URL, and the one that identity replaced (kvnode.storage.system_db.PeerIdentities; "" where
    none), the version of the membership it runs with (0: unsaid), and the replica protocol versions it
    speaks (None: unsaid, as by a kvnode from before they were negotiated). Anything but an identity reads
    as "", anything but a version as 0, anything but a range as None."""

    identity: str = ""
    remembered: str = ""
    replaced: str = ""
    membership: int = 0
    protocols: Versions | None = None

    def headers(self) -> dict[str, str]:
        said = {} if self.protocols is None else {PROTOCOLS_HEADER: str(self.protocols)}
        return {
            IDENTITY_HEADER: self.identity,
            REMEMBERED_HEADER: self.remembered,
            REPLACED_HEADER: self.replaced,
            MEMBERSHIP_HEADER: str(self.membership),
            **said,
        }

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> Introduction:
        """The introduction in request or answer headers (names in any case)."""
        return cls(
            _header_identity(headers, IDENTITY_HEADER),
            _header_identity(headers, REMEMBERED_HEADER),
            _header_identity(headers, REPLACED_HEADER),
            _header_version(headers, MEMBERSHIP_HEADER),
            Versions.parse(_header(headers, PROTOCOLS_HEADER)),
        )

    def fields(self) -> tuple[str, str, str, str]:
        """What a proof covers of it, its protocols aside (ClusterAuth's server proof covers those)."""
        return self.identity, self.remembered, self.replaced, str(self.membership)


def _header_identity(headers: Mapping[str, str], name: str) -> str:
    value = _header(headers, name)
    return value if _IDENTITY.fullmatch(value) else ""


def _header_version(headers: Mapping[str, str], name: str) -> int:
    value = _header(headers, name)
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else 0


def _header(headers: Mapping[str, str], name: str) -> str:
    """A header by name as written or in lower case (kvnode.replica.channel.websocket.parse_head's)."""
    return headers.get(name) or headers.get(name.lower(), "")


# The proof a server's 101 must carry, from the introduction it carries (ClusterAuth.upgrade_headers).
ExpectedProof = Callable[[Introduction], str]


class ClusterAuth:
    """One node's side of the handshake, as client and as server."""

    def __init__(
        self,
        secret: bytes,
        cluster: str,
        own_url: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``cluster``: the cluster's identity (kvnode.topology.membership.cluster_identity)."""
        self._secret = secret
        self._cluster = cluster
        self.own_url = own_url
        self._clock = clock
        self._nonces: collections.OrderedDict[str, float] = collections.OrderedDict()  # nonce -> expiry

    def __repr__(self) -> str:  # never the secret
        return f"ClusterAuth(own_url={self.own_url!r}, cluster={self._cluster[:12]})"

    def _proof(self, role: str, *fields: str) -> str:
        """``fields``: both URLs, both nonces, the client's introduction, and for the server its own."""
        message = "\n".join(("kvnode-replica", PROOF_FORMAT, role, self._cluster, *fields))
        return hmac.new(self._secret, message.encode(), hashlib.sha256).hexdigest()

    def _server_proof(
        self, client_fields: tuple[str, ...], client_protocols: Versions | None, server: Introduction
    ) -> str:
        """Covering both ends' protocol ranges when both said one (see the module's docstring)."""
        ranges = (
            ()
            if client_protocols is None or server.protocols is None
            else (client_protocols, server.protocols)
        )
        return self._proof("server", *client_fields, *server.fields(), *map(str, ranges))

    # --- client side ------------------------------------------------------------------------------------

    def upgrade_headers(
        self, server_url: str, server_nonce: str, introduction: Introduction = Introduction()
    ) -> tuple[dict[str, str], ExpectedProof]:
        """The headers of the upgrade request to ``server_url``, and the proof its 101 must carry (given
        the introduction the 101 carries)."""
        client_nonce = secrets.token_hex(16)
        args = (self.own_url, server_url, client_nonce, server_nonce, *introduction.fields())
        headers = {
            CLIENT_HEADER: self.own_url,
            SERVER_HEADER: server_url,
            CLIENT_NONCE_HEADER: client_nonce,
            SERVER_NONCE_HEADER: server_nonce,
            PROOF_HEADER: self._proof("client", *args),
            **introduction.headers(),
        }
        return headers, lambda server: self._server_proof(args, introduction.protocols, server)

    # --- server side ------------------------------------------------------------------------------------

    def issue_nonce(self) -> str:
        """A challenge: valid once, for NONCE_TTL_S; at most MAX_NONCES are outstanding."""
        now = self._clock()
        nonces = self._nonces
        while nonces and (len(nonces) >= MAX_NONCES or next(iter(nonces.values())) < now):
            nonces.popitem(last=False)
        nonce = secrets.token_hex(16)
        nonces[nonce] = now + NONCE_TTL_S
        return nonce

    def admit(self, headers: Mapping[str, str]) -> tuple[str, Introduction]:
        """Check a client's upgrade request: the client's URL and its introduction, or AuthError."""
        client, server = headers.get(CLIENT_HEADER, ""), headers.get(SERVER_HEADER, "")
        client_nonce, server_nonce = (
            headers.get(CLIENT_NONCE_HEADER, ""),
            headers.get(SERVER_NONCE_HEADER, ""),
        )
        proof = headers.get(PROOF_HEADER, "")
        if not (client and server and client_nonce and server_nonce and proof):
            raise AuthError(
                "no cluster credentials: the connecting node runs without a cluster secret, and this node "
                "has one",
                SECRET_ADVICE,
            )
        if client == self.own_url:
            raise AuthError(f"{client[:100]!r} is this node's own URL")
        if server != self.own_url:
            raise AuthError(f"meant {server[:100]!r}, which is not this node")
        expiry = self._nonces.pop(server_nonce, None)
        if expiry is None or expiry < self._clock():
            raise AuthError("unknown, used or expired challenge")
        introduction = Introduction.of(headers)
        args = (client, server, client_nonce, server_nonce, *introduction.fields())
        if not hmac.compare_digest(proof, self._proof("client", *args)):
            raise AuthError(
                "wrong proof: the connecting node holds a different cluster secret than this node (or "
                "belongs to another cluster)",
                SECRET_ADVICE,
            )
        return client, introduction

    def answer_headers(
        self, request_headers: Mapping[str, str], introduction: Introduction
    ) -> dict[str, str]:
        """The headers of the 101 answering an admitted upgrade request: this node's introduction, and
        its proof."""
        client = Introduction.of(request_headers)
        args = tuple(
            request_headers.get(name, "")
            for name in (CLIENT_HEADER, SERVER_HEADER, CLIENT_NONCE_HEADER, SERVER_NONCE_HEADER)
        )
        proof = self._server_proof((*args, *client.fields()), client.protocols, introduction)
        return {PROOF_HEADER: proof, **introduction.headers()}


def server_proof_ok(headers: Mapping[str, str], expected: ExpectedProof) -> bool:
    """Whether a server's 101 answer carries the proof the client expects."""
    return hmac.compare_digest(_header(headers, PROOF_HEADER), expected(Introduction.of(headers)))


class RateLimitedLog:
    """At most one line per ``interval`` seconds; the lines held back are counted in the next one."""

    def __init__(self, logger: logging.Logger, interval: float = 5.0) -> None:
        self._logger = logger
        self._interval = interval
        self._next = 0.0
        self._held = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            return
        if self._held:
            message += f" ({self._held} more like it not logged)"
        self._logger.warning(message, *args)
        self._next, self._held = now + self._interval, 0


def create_secret_file(path: Path) -> None:
    """Write a new random secret to ``path``, readable by this user only, unless the file exists."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(secrets.token_hex(32).encode() + b"\n")
