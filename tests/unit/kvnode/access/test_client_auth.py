"""Client tokens with roles, in process: the tokens file's rules (a bad line named, never its token; a
file open to others refused), the role table (each role's requests and no more; status and the replica
channel open), which headers carry a role, and the 401 and 403 a request without a valid token or beyond
its role gets. Real nodes started with ``--auth-tokens-file``: tests/process/kvnode/access."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvnode.access.client_auth import (
    BadTokensFile,
    ClientTokens,
    parse_tokens,
    read_tokens_file,
    role_allows,
    role_needed,
    token_refusal,
    unauthorized_reason,
)
from tests.harness import (
    write_secret_file,
)

TOKENS = {"read": "r-Zq8dV3sJ0k", "readwrite": "w-4mXcP1uTf7", "admin": "a-Ly2Hn9QeB5"}
TOKENS_TEXT = "".join(f"{token} {role}\n" for role, token in TOKENS.items())


# --- the rules, in this process -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("tok-1 read\ntok-2 writer\n", "line 2: the role is one of read, readwrite, admin"),
        ("tok-1 read\n\n# two words a line\ntok-2\n", "line 4: expected TOKEN ROLE, found 1 words"),
        ("tok-1 read extra\n", "line 1: expected TOKEN ROLE, found 3 words"),
        ("tok-1 read\ntok-1 admin\n", "line 2: the token is listed already"),
        ("# nothing but a comment\n", "no tokens"),
    ],
)
def test_a_bad_tokens_file_is_refused_naming_the_line_never_the_token(text: str, reason: str) -> None:
    with pytest.raises(BadTokensFile, match=reason) as refused:
        parse_tokens(text, "tokens.txt")
    assert "tok-" not in str(refused.value)


READS = {("GET", "/v0/entity"), ("GET", "/v0/entities")}
WRITES = {("PUT", "/v0/entity"), ("DELETE", "/v0/entity")}
ADMIN = {
    ("GET", "/v0/cluster"),
    ("GET", "/v0/stats"),
    ("GET", "/metrics"),
    ("GET", "/v0/versions"),
    ("POST", "/v0/versions"),
    ("POST", "/v0/remove"),
    ("POST", "/v0/cleanup"),
    ("GET", "/v0/cleanup"),
}


@pytest.mark.parametrize(
    ("role", "allowed"),
    [("read", READS), ("readwrite", READS | WRITES), ("admin", READS | WRITES | ADMIN)],
)
def test_each_role_allows_its_requests_and_no_more(role: str, allowed: set[tuple[str, str]]) -> None:
    every = READS | WRITES | ADMIN
    assert {r for r in every if role_allows(role, *r)} == allowed  # type: ignore[arg-type]


def test_status_and_the_replica_channel_are_open_and_metrics_may_be_opened() -> None:
    assert role_needed("GET", "/v0/status", metrics_open=False) is None
    assert role_needed("GET", "/v0/internal/replica", metrics_open=False) is None
    assert role_needed("GET", "/metrics", metrics_open=False) == "admin"
    assert role_needed("GET", "/metrics", metrics_open=True) is None
    # A wrong path needs only a valid token, so a reader gets its 404 and a stranger learns nothing.
    assert role_needed("GET", "/v0/nowhere", metrics_open=False) == "read"


def test_only_a_bearer_header_with_a_listed_token_has_a_role() -> None:
    table = parse_tokens(TOKENS_TEXT, "tokens")
    assert table.role_of(f"Bearer {TOKENS['admin']}") == "admin"
    for header in (None, "", TOKENS["admin"], f"Basic {TOKENS['admin']}", "Bearer ", "Bearer nope"):
        assert table.role_of(header) is None


def test_a_tokens_file_open_to_others_is_refused(tmp_path: Path) -> None:
    path = write_secret_file(tmp_path / "tokens", TOKENS_TEXT)
    path.chmod(0o640)
    with pytest.raises(BadTokensFile, match=r"open to group or others .* chmod 600"):
        read_tokens_file(path)


def test_a_request_is_refused_401_without_a_valid_token_and_403_beyond_its_role(tmp_path: Path) -> None:
    tokens = ClientTokens(write_secret_file(tmp_path / "tokens", TOKENS_TEXT))
    assert token_refusal(tokens, None, "GET", "/v0/status", None) is None  # an open path
    assert token_refusal(tokens, "read", "GET", "/v0/entity", f"Bearer {TOKENS['read']}") is None
    missing = token_refusal(tokens, "read", "GET", "/v0/entity", None)
    assert missing is not None and missing.status == 401
    assert missing.text == unauthorized_reason(None) + "\n"
    assert missing.headers["WWW-Authenticate"] == 'Bearer realm="kvnode"'
    beyond = token_refusal(tokens, "readwrite", "PUT", "/v0/entity", f"Bearer {TOKENS['read']}")
    assert beyond is not None and (beyond.status, beyond.text) == (
        403,
        "a read token may not PUT /v0/entity\n",
    )


# --- real nodes ---------------------------------------------------------------------------------------
