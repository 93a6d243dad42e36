"""Client tokens with roles: the tokens file's rules and the role table, then real nodes started with
``--auth-tokens-file``: a stranger reads nothing and changes nothing on any path, each role does what it
may and no more, the client passes its token, SIGHUP reads the file again (keeping the old table when the
new file is bad), a bad file stops a node at start naming the line and never the token, and a node
without the flag says once that clients are not authenticated."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvnode.client import BadRequest, Client
from tests.harness import (
    DEADLINE,
    REPO,
    Cluster,
    ClusterFactory,
    Node,
    Response,
    assert_exit_2_with_one_line,
    fresh_key,
    launch_cluster,
    read_chunks,
    request,
    run_kvnode,
    wait_for,
    write_secret_file,
)

TOKENS = {"read": "r-Zq8dV3sJ0k", "readwrite": "w-4mXcP1uTf7", "admin": "a-Ly2Hn9QeB5"}
TOKENS_TEXT = "".join(f"{token} {role}\n" for role, token in TOKENS.items())
SECRET = "a cluster secret of more than enough bytes"
LOCUSTFILE = REPO / "loadtest" / "locustfile.py"


# --- the rules, in this process -----------------------------------------------------------------------


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


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=90)


def test_admin_and_the_load_tools_pass_a_token_from_a_file(cluster: Cluster, tmp_path: Path) -> None:
    admin_token = write_secret_file(tmp_path / "admin.token", TOKENS["admin"] + "\n")
    writer_token = write_secret_file(tmp_path / "writer.token", TOKENS["readwrite"] + "\n")
    url, urls = cluster[0].url, ",".join(cluster.urls)
    admin = ["-m", "kvnode", "admin", "--url", url]
    status = python(*admin, "--token-file", str(admin_token), "status", "--json")
    assert status.returncode == 0 and len(json.loads(status.stdout)["members"]) == 3, status.stderr
    refused = assert_exit_2_with_one_line(python(*admin, "status"))
    assert "answered 401" in refused and "pass an admin token with --token-file FILE" in refused
    reader = write_secret_file(tmp_path / "reader.token", TOKENS["read"] + "\n")
    forbidden = assert_exit_2_with_one_line(python(*admin, "--token-file", str(reader), "status"))
    assert "answered 403" in forbidden and "the token's role is not admin" in forbidden
    backup = python(*admin, "--token-file", str(admin_token), "backup", str(tmp_path / "backup"))
    assert backup.returncode == 0, backup.stderr
    restore = python(*admin, "--token-file", str(admin_token), "restore", str(tmp_path / "backup"))
    assert restore.returncode == 0 and " 0 failed" in restore.stdout, restore.stderr

    keys = ["--keys", "20", "--token-file", str(writer_token)]
    filled = python("-m", "loadtest", "fill", "--url", urls, *keys)
    assert filled.returncode == 0, filled.stderr
    summary = tmp_path / "rate.json"
    rate = python("-m", "loadtest", "rate", "--url", urls, "--op", "put", "--rate", "40", "--duration", "1",
                  "--connections", "4", "--json", str(summary), *keys)  # fmt: skip
    assert rate.returncode == 0, rate.stderr
    assert json.loads(summary.read_text())["errors"] == {}

    # Locust runs until it has made requests, however long a busy machine takes to start it, then is
    # stopped: a fixed duration made no request at all once.
    prefix = tmp_path / "locust"
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2"]
    locust += ["--host", url, "--csv", str(prefix), "--kv-keys", "20", "--kv-workload", "get"]
    locust += ["--kv-token-file", str(writer_token)]
    log = tmp_path / "locust.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(locust, stdout=out, stderr=out)
    try:
        wait_for(
            lambda: process.poll() is not None or locust_requests(prefix) > 0,
            seconds=DEADLINE,
            what="Locust's first requests",
        )
        process.terminate()  # SIGTERM: Locust writes its stats and exits 0 unless a request failed
        process.wait(DEADLINE)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, log.read_text()[-3000:]
    assert locust_requests(prefix) > 0 and locust_totals(prefix)["Failure Count"] == "0"


def locust_totals(prefix: Path) -> dict[str, str]:
    """The Aggregated row of Locust's CSV statistics; empty until Locust has written them."""
    try:
        with open(f"{prefix}_stats.csv", newline="") as stats:
            return next((row for row in csv.DictReader(stats) if row["Name"] == "Aggregated"), {})
    except FileNotFoundError:
        return {}


def locust_requests(prefix: Path) -> int:
    return int(locust_totals(prefix).get("Request Count") or 0)


@pytest.mark.parametrize(
    ("text", "mode", "reason"),
    [
        ("secret-tok read\nsecret-tok2 root\n", 0o600, "line 2: the role is one of"),
        (TOKENS_TEXT, 0o644, "is open to group or others (mode 0644)"),
    ],
)
def test_a_node_refuses_a_bad_tokens_file_at_start(tmp_path: Path, text: str, mode: int, reason: str) -> None:
    tokens = write_secret_file(tmp_path / "tokens", text)
    tokens.chmod(mode)
    args = ["node", "--port", "1", "--data-dir", str(tmp_path / "data"), "--auth-tokens-file", str(tokens)]
    error = assert_exit_2_with_one_line(run_kvnode(args, tmp_path))
    assert reason in error and "secret-tok" not in error and TOKENS["read"] not in error


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def as_role(node: Node, role: str | None, method: str, path: str, **params: str) -> Response:
    headers = bearer(TOKENS[role]) if role else {}
    body = b"changed" if method == "PUT" else None
    return request(node.url, method, path, params, body=body, headers=headers)


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
