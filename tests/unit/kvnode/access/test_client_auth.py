"""Client tokens with roles: the tokens file's rules and the role table, then real nodes started with
``--auth-tokens-file``: a stranger reads nothing and changes nothing on any path, each role does what it
may and no more, the client passes its token, SIGHUP reads the file again (keeping the old table when the
new file is bad), a bad file stops a node at start naming the line and never the token, and a node
without the flag says once that clients are not authenticated."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvnode.access.client_auth import BadTokensFile, parse_tokens, read_tokens_file, role_allows, role_needed
from kvnode.client import BadRequest, Client
from tests.harness import (
    Cluster,
    ClusterFactory,
    Node,
    Response,
    fresh_key,
    launch_cluster,
    read_chunks,
    request,
    wait_for,
    write_secret_file,
)

TOKENS = {"read": "r-Zq8dV3sJ0k", "readwrite": "w-4mXcP1uTf7", "admin": "a-Ly2Hn9QeB5"}
TOKENS_TEXT = "".join(f"{token} {role}\n" for role, token in TOKENS.items())
SECRET = "a cluster secret of more than enough bytes"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


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


# --- real nodes ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-node cluster with a cluster secret and client tokens, for the module's read-only checks."""
    tmp_path = tmp_path_factory.mktemp("tokens")
    tokens = write_secret_file(tmp_path / "tokens", TOKENS_TEXT)
    nodes = launch_cluster(tmp_path, 3, cluster_secret=SECRET, auth_tokens_file=tokens)
    try:
        yield nodes
    finally:
        nodes.stop()


def as_role(node: Node, role: str | None, method: str, path: str, **params: str) -> Response:
    headers = bearer(TOKENS[role]) if role else {}
    body = b"changed" if method == "PUT" else None
    return request(node.url, method, path, params, body=body, headers=headers)


# Every client request, with the parameters that make it valid.
CLIENT_REQUESTS = [
    ("GET", "/v0/entity", {"id": "k"}),
    ("PUT", "/v0/entity", {"id": "k"}),
    ("DELETE", "/v0/entity", {"id": "k"}),
    ("GET", "/v0/entities", {"start": "k"}),
    ("GET", "/v0/cluster", {}),
    ("GET", "/v0/stats", {}),
    ("GET", "/metrics", {}),
    ("GET", "/v0/versions", {}),
    ("POST", "/v0/versions", {}),
    ("GET", "/v0/nowhere", {}),
]


def test_a_stranger_reads_nothing_and_changes_nothing(cluster: Cluster) -> None:
    node = cluster[0]
    key = fresh_key("kept")
    assert as_role(node, "readwrite", "PUT", "/v0/entity", id=key, ack="3").status == 201
    for headers in ({}, bearer("not-a-token"), {"Authorization": TOKENS["admin"]}):
        for method, path, params in CLIENT_REQUESTS:
            answer = request(node.url, method, path, {**params, "id": key} if "id" in params else params,
                             body=b"x" if method == "PUT" else None, headers=headers)  # fmt: skip
            assert answer.status == 401, (method, path, headers, answer)
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert key.encode() not in answer.body and b"kept" not in answer.body
        status, chunks = read_chunks(node.url, "/v0/entities", {"start": "kept"})
        assert status == 401 and key.encode() not in b"".join(chunks)
    for each in cluster:  # the PUT and DELETE above changed nothing on any replica
        assert as_role(each, "read", "GET", "/v0/entity", id=key, ack="3").body == b"changed"
    assert request(node.url, "GET", "/v0/status").status == 200  # names the node only


def test_each_role_does_what_it_may_and_is_refused_the_rest(cluster: Cluster) -> None:
    node = cluster[1]
    key = fresh_key("roles")
    assert as_role(node, "read", "PUT", "/v0/entity", id=key).status == 403
    assert as_role(node, "readwrite", "PUT", "/v0/entity", id=key, ack="3").status == 201
    assert as_role(node, "read", "GET", "/v0/entity", id=key).body == b"changed"
    assert as_role(node, "read", "GET", "/v0/entities", start=key).status == 200
    assert as_role(node, "read", "GET", "/v0/nowhere").status == 404
    refused = as_role(node, "read", "DELETE", "/v0/entity", id=key)
    assert refused.status == 403 and refused.text == "a read token may not DELETE /v0/entity\n"
    for path in ("/v0/cluster", "/v0/stats", "/metrics", "/v0/versions"):
        assert as_role(node, "readwrite", "GET", path).status == 403, path
        assert as_role(node, "admin", "GET", path).status == 200, path
    assert as_role(node, "readwrite", "DELETE", "/v0/entity", id=key, ack="3").status == 202
    assert as_role(node, "admin", "GET", "/v0/entity", id=key).status == 404


async def test_the_client_passes_its_token_and_routes_without_admin(cluster: Cluster) -> None:
    key = fresh_key("client")
    async with Client(cluster[0].url, token=TOKENS["readwrite"]) as kv:
        assert set(kv.members) == set(cluster.urls)  # from /v0/status: the token may not read /v0/cluster
        await kv.put(key, b"v", ack=3)
    async with Client(cluster[2].url, token=TOKENS["read"]) as kv:
        assert await kv.get(key) == b"v"
        with pytest.raises(BadRequest) as refused:
            await kv.delete(key)
        assert refused.value.status == 403
    with pytest.raises(Exception, match="401"):
        async with Client(cluster[0].url):
            pass


def test_sighup_reads_the_file_again_and_keeps_the_old_table_when_it_is_bad(
    tmp_path: Path, start_cluster: ClusterFactory
) -> None:
    tokens = write_secret_file(tmp_path / "tokens", TOKENS_TEXT)
    node = start_cluster(1, auth_tokens_file=tokens, metrics_open=True)[0]
    assert request(node.url, "GET", "/metrics").status == 200  # --metrics-open
    assert request(node.url, "GET", "/v0/stats").status == 401
    write_secret_file(tokens, "a-new-admin-token admin\n")
    os.kill(node.pid, signal.SIGHUP)
    wait_for(
        lambda: request(node.url, "GET", "/v0/stats", headers=bearer("a-new-admin-token")).status == 200,
        what="the new token to be read",
    )
    assert request(node.url, "GET", "/v0/stats", headers=bearer(TOKENS["admin"])).status == 401
    write_secret_file(tokens, "a-newer-token superuser\n")
    os.kill(node.pid, signal.SIGHUP)
    wait_for(lambda: "kept the 1 client tokens in use" in node.log_path.read_text(), what="the log line")
    assert request(node.url, "GET", "/v0/stats", headers=bearer("a-new-admin-token")).status == 200
    log = node.log_path.read_text()
    assert "line 1: the role is one of" in log
    assert all(token not in log for token in ("a-new-admin-token", "a-newer-token", *TOKENS.values()))


def test_a_node_without_tokens_says_once_that_clients_are_not_authenticated(node: Node) -> None:
    assert node.log_path.read_text().count("clients are not authenticated") == 1
