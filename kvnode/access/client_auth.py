"""Client tokens and their roles (``--auth-tokens-file``): the file's format, the token table, which role
each request needs, and the table kept current on SIGHUP.

The file has one ``TOKEN ROLE`` a line (blank lines and ``#`` comments aside), roles ``read`` (GET of
/v0/entity and /v0/entities), ``readwrite`` (also PUT and DELETE) and ``admin`` (also /v0/cluster,
/v0/stats, /metrics, /v0/repair, /v0/cleanup, /v0/leave, /v0/remove, /v0/replication-factor and
/v0/versions); it must be readable by its owner only, as the cluster secret's file. An error names the
line, never a token.
Tokens are kept by their SHA-256 digest: a lookup is one dict access, and the digest found is compared
again with ``hmac.compare_digest``, so neither the lookup's timing nor the table in memory gives a token away.

    >>> table = parse_tokens("alice-token readwrite\\n# a comment\\nbob-token read\\n", "tokens")
    >>> table.role_of("Bearer alice-token"), table.role_of("Bearer nobody"), table.role_of(None)
    ('readwrite', None, None)
    >>> role_allows("read", "PUT", "/v0/entity"), role_allows("readwrite", "PUT", "/v0/entity")
    (False, True)
    >>> role_needed("GET", "/v0/status", metrics_open=False) is None  # open to anyone
    True
    >>> unauthorized_reason(None)
    "no client token: send 'Authorization: Bearer TOKEN' with a token of the node's --auth-tokens-file"
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from pathlib import Path
from typing import Literal, get_args

from aiohttp import hdrs, web

from kvnode.replica.channel.client import PEER_PATH
from kvnode.replica.channel.handshake import CHALLENGE_PATH

__all__ = [
    "BadTokensFile",
    "ClientTokens",
    "Role",
    "TokenTable",
    "covers",
    "parse_tokens",
    "read_tokens_file",
    "role_allows",
    "role_needed",
    "token_refusal",
    "unauthorized_reason",
]

log = logging.getLogger("kvnode")

Role = Literal["read", "readwrite", "admin"]
_RANK: dict[Role, int] = {"read": 0, "readwrite": 1, "admin": 2}
_ROLES: tuple[Role, ...] = get_args(Role)
# Paths anyone may use: the node's name (a launcher's probe), and the replica channel, which has the
# cluster secret's handshake of its own (kvnode.replica.channel.handshake).
_OPEN_PATHS = frozenset({"/v0/status", CHALLENGE_PATH, PEER_PATH})
_ADMIN_PATHS = frozenset(
    {
        "/v0/cluster",
        "/v0/stats",
        "/metrics",
        "/v0/repair",
        "/v0/leave",
        "/v0/remove",
        "/v0/replication-factor",
        "/v0/versions",
        "/v0/paxos",
        "/v0/cleanup",
    }
)  # kvnode.node.operator_api, kvnode.node.versions_api
_BEARER = "Bearer "


class BadTokensFile(ValueError):
    """The tokens file cannot be used: one line naming the file and, for a bad line, its number."""


class TokenTable:
    """Tokens (by their SHA-256 digest) and their roles."""

    def __init__(self, roles: dict[bytes, Role]) -> None:
        self._entries = {digest: (digest, role) for digest, role in roles.items()}

    def __len__(self) -> int:
        return len(self._entries)

    def role_of(self, authorization: str | None) -> Role | None:
        """The role of the token in an ``Authorization: Bearer TOKEN`` header; None for no valid one."""
        if authorization is None or not authorization.startswith(_BEARER):
            return None
        digest = _digest(authorization[len(_BEARER) :].strip())
        entry = self._entries.get(digest)
        if entry is None:
            return None
        # The dict matched the digest (whose bytes a caller cannot steer); compare again in constant time.
        known, role = entry
        return role if hmac.compare_digest(known, digest) else None


def unauthorized_reason(authorization: str | None) -> str:
    """The 401's one line for a request whose ``Authorization`` header holds no valid token: none sent,
    or one this node does not know. It says nothing a stranger could not tell already (never the token,
    nor whether a token like it exists)."""
    if authorization is None or not authorization.startswith(_BEARER):
        return (
            "no client token: send 'Authorization: Bearer TOKEN' with a token of the node's "
            "--auth-tokens-file"
        )
    return (
        "a client token this node does not know: check it against the node's --auth-tokens-file "
        "(the node reads it again on SIGHUP)"
    )


def role_needed(method: str, path: str, *, metrics_open: bool) -> Role | None:
    """The least role a request needs; None for a path open to anyone. Entity writes need readwrite, the
    operator's paths admin, and anything else a valid token (a read token gets 404 for a wrong path)."""
    if path in _OPEN_PATHS or (metrics_open and path == "/metrics"):
        return None
    if path in _ADMIN_PATHS:
        return "admin"
    if path == "/v0/entity" and method in ("PUT", "DELETE"):
        return "readwrite"
    return "read"


def role_allows(role: Role, method: str, path: str, *, metrics_open: bool = False) -> bool:
    """Whether a token of ``role`` may make this request."""
    needed = role_needed(method, path, metrics_open=metrics_open)
    return needed is None or covers(role, needed)


def token_refusal(
    tokens: ClientTokens, needed: Role | None, method: str, path: str, authorization: str | None
) -> web.Response | None:
    """The answer to a request that needs ``needed`` (None: nothing) and sent ``authorization``: 401 (with
    ``WWW-Authenticate: Bearer``) without a valid token, 403 for a token whose role does not allow it;
    None when it may go on. The app's token check (kvnode.node.app) and the gate's for the hot routes
    (kvnode.access.connections) both answer by it."""
    if needed is None:
        return None
    role = tokens.table.role_of(authorization)
    if role is None:
        return web.Response(
            status=401,
            text=unauthorized_reason(authorization) + "\n",
            headers={hdrs.WWW_AUTHENTICATE: 'Bearer realm="kvnode"'},
        )
    if not covers(role, needed):
        return web.Response(status=403, text=f"a {role} token may not {method} {path}\n")
    return None


def covers(role: Role, needed: Role) -> bool:
    """Whether ``role`` allows everything ``needed`` does (each role allows its predecessors' requests)."""
    return _RANK[role] >= _RANK[needed]


def parse_tokens(text: str, source: str) -> TokenTable:
    """The table from a tokens file's text; BadTokensFile names ``source`` and the line at fault."""
    roles: dict[bytes, Role] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        where = f"{source} line {number}"
        if len(words) != 2:
            raise BadTokensFile(f"{where}: expected TOKEN ROLE, found {len(words)} words")
        token, role = words
        if role not in _ROLES:
            raise BadTokensFile(f"{where}: the role is one of {', '.join(_ROLES)}")
        digest = _digest(token)
        if digest in roles:
            raise BadTokensFile(f"{where}: the token is listed already")
        roles[digest] = role
    if not roles:
        raise BadTokensFile(f"{source}: no tokens (one TOKEN ROLE a line)")
    return TokenTable(roles)


def read_tokens_file(path: Path) -> TokenTable:
    """The table in ``path``, refused when group or others may read it (whoever reads it holds every
    token), or it cannot be read or parsed."""
    try:
        mode = path.stat().st_mode & 0o777
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise BadTokensFile(f"cannot read the tokens file {path}: {reason}") from None
    if mode & 0o077:
        raise BadTokensFile(
            f"the tokens file {path} is open to group or others (mode {mode:04o}): chmod 600 {path}"
        )
    return parse_tokens(text, str(path))


class ClientTokens:
    """The node's current token table, read at start (BadTokensFile then) and again on :meth:`reload`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.table = read_tokens_file(path)

    def reload(self) -> None:
        """Read the file again; if it is bad now, keep the table in use. One log line either way."""
        try:
            self.table = read_tokens_file(self.path)
        except BadTokensFile as error:
            log.warning("kept the %d client tokens in use: %s", len(self.table), error)
            return
        log.info("read %d client tokens from %s", len(self.table), self.path)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
