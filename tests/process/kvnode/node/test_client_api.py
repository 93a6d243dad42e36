"""The client-facing HTTP API of one node (a cluster of one), against a real node process: a value comes
back with its exact bytes (empty, 1 MiB, every byte value; any id, percent-encoded), PUT is 201, DELETE
202, an absent or deleted key 404, and a request the API refuses is 400 or 413 and writes nothing; and
range scans: one chunk per live record, in key byte order, streamed. (An unknown path's 404 and a method's
405 are tests/unit/kvnode/node/test_app.py's.)

Node processes take a while to start on a busy machine, so most tests share one node per module and keep
to their own key prefix (``ns``); tests that need an empty store or other options start their own.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

import pytest

from kvnode.config import NodeConfig, node_url
from kvnode.ops.ports import start_on_free_ports
from kvnode.ops.processes import start_together
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record
from kvnode.topology.membership import cluster_identity
from tests.harness import ClusterFactory, Node, Response, launch_cluster, read_chunks, request, wait_for

ENTITY = "/v0/entity"
ENTITIES = "/v0/entities"
ALL_BYTES = bytes(range(256))


def target(path: str, params: dict[str, str]) -> str:
    return path + "?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


def assert_reason(response: Response, status: int) -> None:
    """A rejection: the status, and a one-line plain-text reason."""
    assert response.status == status, (response.status, response.body)
    assert response.headers["content-type"].startswith("text/plain"), response.headers
    text = response.text
    assert text.endswith("\n") and text.count("\n") == 1, repr(text)
    assert text.strip(), "the reason is empty"


def assert_store_is(node: Node, expected: list[tuple[bytes, bytes]]) -> None:
    """The node's live records, all of them, are exactly these."""
    assert node.scan("\x00") == expected
    status, chunks = read_chunks(node.url, ENTITIES, {"start": "\x00"})
    assert status == 200 and len(chunks) == len(expected)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node for the tests of this module that keep to their own keys."""
    cluster = launch_cluster(tmp_path_factory.mktemp("shared-node"), 1)
    try:
        yield cluster[0]
    finally:
        cluster.stop()


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> str:
    """This test's key prefix on the shared node."""
    return f"{request.node.name}/"


def scan_ns(node: Node, ns: str, start: str = "", end: str | None = None) -> list[tuple[bytes, bytes]]:
    """A scan inside one key prefix: start and end are relative to it, and so are the keys returned."""
    records = node.scan(ns + start, ns + ("\U0010ffff" if end is None else end))
    assert all(key.startswith(ns.encode()) for key, _ in records)
    return [(key[len(ns.encode()) :], value) for key, value in records]


def whole_store(node: Node) -> list[tuple[bytes, bytes]]:
    return node.scan("\x00")


# --- GET / PUT / DELETE ---------------------------------------------------------------------------


def test_status_answers_200_naming_the_node(shared: Node) -> None:
    response = request(shared.url, "GET", "/v0/status")
    assert response.status == 200
    assert response.headers["content-type"].startswith("application/json")
    assert json.loads(response.body) == {
        "url": shared.url,
        "pid": shared.pid,
        "cluster": [shared.url],
        "tokens": [shared.url],
        "zones": ["127.0.0.1"],
        "datacenters": ["dc1"],
        "cluster_id": cluster_identity([shared.url]),
        "membership_version": 1,
        "replication_factor": 1,
        "next_replication_factor": 0,
        "joining": [],
        "leaving": [],
        "data": "serving",
    }


def test_ready_status_is_200_on_a_node_whose_data_is_whole(shared: Node) -> None:
    response = request(shared.url, "GET", "/v0/status?ready")
    assert response.status == 200 and json.loads(response.body)["data"] == "serving"


def test_ready_status_is_503_while_the_data_is_not_known_whole(tmp_path: Path) -> None:
    """A new node of a two-member cluster whose peer never starts: it serves (plain /v0/status is 200),
    but no peer has told it whether its data is whole, so ``?ready`` is 503 with the same body."""

    def start(ports: list[int]) -> Node:
        urls = tuple(node_url("127.0.0.1", port) for port in ports)
        node = Node(
            NodeConfig(port=ports[0], data_dir=tmp_path / "node", cluster=urls), tmp_path / "node.log"
        )
        start_together([node])
        return node

    node = start_on_free_ports(2, start)
    assert request(node.url, "GET", "/v0/status").status == 200
    response = request(node.url, "GET", "/v0/status?ready")
    assert response.status == 503 and json.loads(response.body)["data"] == "unknown"


@pytest.mark.parametrize(
    ("query", "reason"),
    [("ready=1", "'ready' takes no value"), ("ready&ready", "given 2 times"), ("readiness", "'readiness'")],
)
def test_a_ready_status_asked_wrongly_is_400_naming_the_parameter(
    shared: Node, query: str, reason: str
) -> None:
    response = request(shared.url, "GET", f"/v0/status?{query}")
    assert_reason(response, 400)
    assert reason in response.text, response.text


def test_put_201_then_get_200_with_the_exact_bytes(shared: Node, ns: str) -> None:
    response = shared.put(ns + "k", b"hello")
    assert response.status == 201
    response = shared.get(ns + "k")
    assert response.status == 200
    assert response.body == b"hello"
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-length"] == "5"


def test_get_of_an_absent_key_is_404(shared: Node, ns: str) -> None:
    assert_reason(shared.get(ns + "never-written"), 404)


def test_delete_202_then_get_404(shared: Node, ns: str) -> None:
    assert shared.put(ns + "k", b"v").status == 201
    assert shared.delete(ns + "k").status == 202
    assert_reason(shared.get(ns + "k"), 404)
    assert shared.delete(ns + "k").status == 202  # deleting again is fine
    assert shared.delete(ns + "never-written").status == 202
    assert_reason(shared.get(ns + "never-written"), 404)
    assert scan_ns(shared, ns) == []


def test_empty_value_is_a_value(shared: Node, ns: str) -> None:
    assert shared.put(ns + "empty", b"").status == 201
    response = shared.get(ns + "empty")
    assert (response.status, response.body) == (200, b"")
    assert response.headers["content-length"] == "0"
    assert scan_ns(shared, ns) == [(b"empty", b"")]


def test_one_mib_value(shared: Node, ns: str) -> None:
    value = random.Random(1).randbytes(1024 * 1024)
    assert shared.put(ns + "big", value).status == 201
    response = shared.get(ns + "big")
    assert response.status == 200
    assert response.body == value


def test_every_byte_value_in_values(shared: Node, ns: str) -> None:
    values = {
        "all": ALL_BYTES,
        "all-reversed": ALL_BYTES[::-1] * 3,
        "http-lookalike": b"0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n\x00",
    }
    values.update({f"byte-{byte:03d}": bytes([byte]) for byte in range(256)})
    for key, value in values.items():
        assert shared.put(ns + key, value).status == 201, key
    for key, value in values.items():
        response = shared.get(ns + key)
        assert (response.status, response.body) == (200, value), key


IDS = [
    "with space",
    "a/b/c",
    "/leading/slash/",
    "a&b=c",
    "x=1&y=2",
    "100%",
    "%41",  # must not be decoded twice into "A"
    "%",
    "a+b",
    "a b",  # distinct from "a+b"
    "q?r#s",
    "semi;colon,comma",
    "tab\tand\\backslash",
    "ключ",
    "日本語のキー",
    "emoji 🎉",
    "é",
    "e\u0301",  # the same text as "é" once normalised, but other bytes: a different key
    "nul\x00byte",
    "new\nline",
]


def test_ids_with_reserved_and_unicode_characters(shared: Node, ns: str) -> None:
    for number, key in enumerate(IDS):
        assert shared.put(ns + key, f"value {number}".encode()).status == 201, key
    for number, key in enumerate(IDS):
        response = shared.get(ns + key)
        assert (response.status, response.body) == (200, f"value {number}".encode()), key
    # each id is stored under its own UTF-8 bytes
    status, chunks = read_chunks(shared.url, ENTITIES, {"start": ns, "end": ns + "\U0010ffff"})
    assert status == 200
    expected = sorted(f"{ns}{key}\nvalue {number}".encode() for number, key in enumerate(IDS))
    assert chunks == expected
    for key in IDS:
        assert shared.delete(ns + key).status == 202, key
        assert shared.get(ns + key).status == 404, key
    assert scan_ns(shared, ns) == []


def test_unencoded_reserved_characters_in_the_query(shared: Node, ns: str) -> None:
    # A client that does not percent-encode '/' or '+': '/' is literal, '+' is a space (form encoding).
    prefix = urllib.parse.quote(ns, safe="")
    assert request(shared.url, "PUT", f"{ENTITY}?id={prefix}a/b", body=b"slash").status == 201
    assert shared.get(ns + "a/b").body == b"slash"
    assert request(shared.url, "PUT", f"{ENTITY}?id={prefix}x+y", body=b"plus").status == 201
    assert shared.get(ns + "x y").body == b"plus"
    assert shared.get(ns + "x+y").status == 404


def test_overwrite_delete_and_recreate_many_times(shared: Node, ns: str) -> None:
    key = ns + "k"
    for round_ in range(15):
        long_value = f"round {round_} ".encode() * (round_ + 1)
        assert shared.put(key, long_value).status == 201
        assert shared.get(key).body == long_value
        assert shared.put(key, b"short").status == 201  # overwrite with a shorter value
        assert shared.get(key).body == b"short"
        assert shared.delete(key).status == 202
        assert shared.get(key).status == 404
        assert scan_ns(shared, ns) == []
    assert shared.put(key, b"final").status == 201
    assert scan_ns(shared, ns) == [(b"k", b"final")]


def test_explicit_valid_quorum_parameters(shared: Node, ns: str) -> None:
    key = ns + "k"
    assert shared.put(key, b"v", ack=1, from_=1).status == 201
    assert shared.put(key, b"v2", ack=1).status == 201
    assert shared.get(key, from_=1).body == b"v2"
    assert shared.get(key, ack=1, from_=1).body == b"v2"
    assert shared.delete(key, ack=1, from_=1).status == 202
    assert shared.get(key, ack=1).status == 404


def test_consistency_levels_by_name(shared: Node, ns: str) -> None:
    key = ns + "k"
    for level in ("one", "quorum", "local_quorum", "each_quorum", "all", "LOCAL_QUORUM"):
        assert request(shared.url, "PUT", target(ENTITY, {"id": key, "ack": level}), body=b"v").status == 201
        assert request(shared.url, "GET", target(ENTITY, {"id": key, "ack": level})).body == b"v"
    assert request(shared.url, "DELETE", target(ENTITY, {"id": key, "ack": "all"})).status == 202


# --- rejections ---------------------------------------------------------------------------------------


def test_missing_or_empty_id_is_400(shared: Node) -> None:
    before = whole_store(shared)
    targets = [
        ENTITY,
        ENTITY + "?id=",
        ENTITY + "?key=k",
        ENTITY + "?ID=k",
        ENTITY + "?id",
        ENTITY + "?ack=1",
    ]
    for method in ("GET", "PUT", "DELETE"):
        for bad in targets:
            response = request(shared.url, method, bad, body=b"v" if method == "PUT" else None)
            assert_reason(response, 400)
            assert "id" in response.text, (method, bad, response.text)
    assert whole_store(shared) == before


def test_a_raw_non_ascii_request_line_is_a_one_line_400_and_logged_in_one_line(shared: Node) -> None:
    """aiohttp's parser refuses it before any handler; the node answers and logs one line (not aiohttp's
    multi-line dump, not a traceback), and serves."""
    port = int(shared.url.rsplit(":", 1)[1])
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /v0/entity?id=\xc3\xa9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = sock.makefile("rb").read()
        assert answer.split(b"\r\n", 1)[0].split()[1] == b"400", answer
        assert answer.split(b"\r\n\r\n", 1)[1] == b"malformed request: Invalid char in url query\n", answer
    wait_for(lambda: "malformed request" in shared.log_path.read_text(), what="the node to log the refusal")
    log = shared.log_path.read_text()
    assert (
        "Traceback" not in log
        and "answered 400 to a request from 127.0.0.1: malformed request: Invalid char" in log
    )
    assert log.count("malformed request") == 1  # rate-limited: the other two are counted in the next line
    assert shared.get("after-a-malformed-request").status == 404


def test_ids_that_are_not_utf8_once_decoded_are_400_and_nothing_is_written(shared: Node, ns: str) -> None:
    before = whole_store(shared)
    for bad in ("%FF", "%FE", "%ED%A0%80", ns + "%C3"):
        response = request(shared.url, "PUT", f"{ENTITY}?id={bad}", body=b"v")
        assert_reason(response, 400)
        assert "UTF-8" in response.text, (bad, response.text)
    assert_reason(request(shared.url, "GET", "/v0/entities?start=%FF"), 400)
    assert whole_store(shared) == before
    # The replacement character itself, properly encoded, is an ordinary id.
    assert request(shared.url, "PUT", f"{ENTITY}?id={ns}%EF%BF%BD", body=b"v").status == 201
    assert shared.get(ns + "\ufffd").body == b"v"


BAD_QUORUMS = [
    {"ack": "0"},
    {"ack": "-1"},
    {"ack": "abc"},
    {"ack": "1.5"},
    {"ack": ""},
    {"ack": "1e0"},
    {"ack": "²"},  # a digit to str.isdigit, not an integer
    {"ack": " 1"},
    {"ack": "2"},  # ack > from (from defaults to the cluster size, 1)
    {"from": "0"},
    {"from": "-1"},
    {"from": "abc"},
    {"from": "1.5"},
    {"from": ""},
    {"from": "2"},  # from > cluster size
    {"from": "99999999999999999999"},
    {"ack": "2", "from": "1"},  # ack > from
    {"ack": "1", "from": "2"},  # from > cluster size
    {"ack": "3", "from": "2"},
    {"ack": "0", "from": "1"},
    {"ack": "most"},  # not a consistency level
    {"ack": "quorum", "from": "1"},  # a named ack counts the owners itself
]


def test_bad_ack_or_from_is_400_and_nothing_is_written(shared: Node, ns: str) -> None:
    assert shared.put(ns + "kept", b"original").status == 201
    before = whole_store(shared)
    for params in BAD_QUORUMS:
        for method, key in (("PUT", "new"), ("PUT", "kept"), ("DELETE", "kept"), ("GET", "kept")):
            response = request(
                shared.url,
                method,
                target(ENTITY, {"id": ns + key, **params}),
                body=b"rejected" if method == "PUT" else None,
            )
            assert_reason(response, 400)
            assert any(name in response.text for name in params), (params, response.text)
    assert shared.get(ns + "kept").body == b"original"
    assert shared.get(ns + "new").status == 404
    assert whole_store(shared) == before


@pytest.mark.parametrize(
    ("path", "query"),
    [
        (ENTITY, "id=a&id=b"),
        (ENTITY, "id=a&id=a"),
        (ENTITY, "id=a&ack=1&ack=1"),
        (ENTITY, "id=a&from=1&from=1"),
        (ENTITIES, "start=a&start=b"),
        (ENTITIES, "start=a&end=b&end=c"),
    ],
)
def test_a_query_parameter_given_twice_is_400_and_nothing_is_written(
    shared: Node, path: str, query: str
) -> None:
    before = whole_store(shared)
    name = query.rpartition("&")[2].partition("=")[0]  # the parameter given twice
    for method in ("GET", "PUT", "DELETE") if path == ENTITY else ("GET",):
        response = request(shared.url, method, f"{path}?{query}", body=b"v" if method == "PUT" else None)
        assert_reason(response, 400)
        assert repr(name) in response.text, response.text
    assert whole_store(shared) == before


@pytest.mark.parametrize(
    ("path", "query", "unknown"),
    [
        (ENTITY, "id=k1&acks=3", "acks"),
        (ENTITY, "id=k1&ack=1&form=1", "form"),
        (ENTITY, "ID=k1", "ID"),
        (ENTITY, "id=k1&", None),  # an empty pair is no parameter
        (ENTITIES, "start=a&stop=b", "stop"),
    ],
)
def test_an_unknown_query_parameter_is_400_naming_it_and_nothing_is_written(
    shared: Node, ns: str, path: str, query: str, unknown: str | None
) -> None:
    before = whole_store(shared)
    query = query.replace("k1", urllib.parse.quote(ns + "k1"))
    for method in ("GET", "PUT", "DELETE") if path == ENTITY else ("GET",):
        response = request(shared.url, method, f"{path}?{query}", body=b"v" if method == "PUT" else None)
        if unknown is None:
            assert response.status in (200, 201, 202, 404), (method, response.status, response.text)
            continue
        assert_reason(response, 400)
        assert f"unknown query parameter {unknown!r}" in response.text, response.text
    if unknown is not None:
        assert whole_store(shared) == before


def test_missing_or_empty_start_is_400(shared: Node) -> None:
    for bad in (
        ENTITIES,
        ENTITIES + "?start=",
        ENTITIES + "?end=z",
        ENTITIES + "?start=&end=z",
        ENTITIES + "?s=a",
    ):
        response = request(shared.url, "GET", bad)
        assert_reason(response, 400)
        assert "start" in response.text


def _chunked_put(url: str, key: str, pieces: list[bytes]) -> Response:
    """A PUT whose body is sent with chunked transfer encoding (no Content-Length up front)."""
    parsed = urllib.parse.urlsplit(url)
    assert parsed.hostname is not None and parsed.port is not None
    with socket.create_connection((parsed.hostname, parsed.port), timeout=30) as sock:
        head = (
            f"PUT {target(ENTITY, {'id': key})} HTTP/1.1\r\nHost: {parsed.netloc}\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces if piece) + b"0\r\n\r\n"
        # the server may answer and close before it has read everything
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head.encode() + body)
        stream = sock.makefile("rb")
        status = int(stream.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return Response(status, stream.read(int(headers.get("content-length", "0"))), headers)


def test_body_over_the_limit_is_413_and_nothing_is_written(start_cluster: ClusterFactory) -> None:
    node = start_cluster(1, max_body_bytes=1024)[0]
    assert node.put("at-limit", b"a" * 1024).status == 201
    assert node.get("at-limit").body == b"a" * 1024
    assert_reason(node.put("over", b"b" * 1025), 413)
    assert_reason(node.put("way-over", b"b" * 200_000), 413)
    assert_reason(node.put("at-limit", b"c" * 1025), 413)  # an overwrite over the limit
    # the same with a chunked body, whose size the node only learns while reading it
    assert _chunked_put(node.url, "chunked-ok", [b"d" * 500, b"d" * 524]).status == 201
    assert_reason(_chunked_put(node.url, "chunked-over", [b"e" * 1000, b"e" * 25]), 413)
    assert_reason(_chunked_put(node.url, "chunked-ok", [b"f" * 700] * 3), 413)
    assert node.get("over").status == 404
    assert node.get("way-over").status == 404
    assert node.get("chunked-over").status == 404
    assert_store_is(node, [(b"at-limit", b"a" * 1024), (b"chunked-ok", b"d" * 1024)])


def test_default_body_limit_is_16_mib(shared: Node, ns: str) -> None:
    limit = 16 * 1024 * 1024
    assert_reason(shared.put(ns + "k", b"x" * (limit + 1)), 413)
    assert shared.get(ns + "k").status == 404
    assert shared.put(ns + "k", b"y" * limit).status == 201
    assert shared.get(ns + "k").body == b"y" * limit


# --- range scans --------------------------------------------------------------------------------------


def test_scan_of_an_empty_store(node: Node) -> None:
    status, chunks = read_chunks(node.url, ENTITIES, {"start": "a"})
    assert (status, chunks) == (200, [])
    status, chunks = read_chunks(node.url, ENTITIES, {"start": "\x00", "end": "\U0010ffff"})
    assert (status, chunks) == (200, [])
    # a store holding only tombstones is empty to a scan too
    assert node.put("k", b"v").status == 201
    assert node.delete("k").status == 202
    assert_store_is(node, [])


def test_scan_is_chunked_and_one_chunk_per_record(shared: Node, ns: str) -> None:
    values = {
        "a": b"plain",
        "b": b"line one\nline two\n",
        "c": b"\n",
        "d": b"",
        "e": b"\r\n0\r\n\r\n",  # looks like the end of a chunked body
        "f": ALL_BYTES,
        "g": b"k\nv\nk\nv",
    }
    for key, value in values.items():
        assert shared.put(ns + key, value).status == 201
    params = {"start": ns, "end": ns + "\U0010ffff"}
    response = request(shared.url, "GET", target(ENTITIES, params))
    assert response.status == 200
    assert response.headers.get("transfer-encoding") == "chunked"
    status, chunks = read_chunks(shared.url, ENTITIES, params)
    assert status == 200
    assert chunks == [(ns + key).encode() + b"\n" + value for key, value in values.items()]
    assert response.body == b"".join(chunks)


def test_scan_open_ended_and_bounded(node: Node) -> None:
    keys = ["a", "b", "ba", "bb", "c", "d"]
    for key in keys:
        assert node.put(key, key.upper().encode()).status == 201

    def scan(start: str, end: str | None = None) -> list[str]:
        return [key.decode() for key, _ in node.scan(start, end)]

    assert scan("a") == keys
    assert scan("\x00") == keys
    assert scan("b") == ["b", "ba", "bb", "c", "d"]
    assert scan("bb") == ["bb", "c", "d"]
    assert scan("bc") == ["c", "d"]
    assert scan("e") == []
    assert scan("b", "c") == ["b", "ba", "bb"]  # start inclusive, end exclusive
    assert scan("a", "ba") == ["a", "b"]
    assert scan("0", "z") == keys
    assert node.scan("b", "c") == [(b"b", b"B"), (b"ba", b"BA"), (b"bb", b"BB")]


def test_scan_with_end_at_or_before_start_is_empty(shared: Node, ns: str) -> None:
    for key in ("a", "b", "c"):
        assert shared.put(ns + key, b"v").status == 201
    assert scan_ns(shared, ns, "b", "b") == []
    assert scan_ns(shared, ns, "c", "a") == []
    assert scan_ns(shared, ns, "b", "a\xff") == []
    status, chunks = read_chunks(shared.url, ENTITIES, {"start": ns + "b", "end": ""})  # "" sorts first
    assert (status, chunks) == (200, [])
    assert [key for key, _ in scan_ns(shared, ns)] == [b"a", b"b", b"c"]


def test_scan_orders_by_key_bytes(shared: Node, ns: str) -> None:
    # UTF-8 byte order: upper case before lower case, 'z' (7a) before 'é' (c3 a9) before '日' (e6 97 a5),
    # U+FFFF (ef bf bf) before U+1F389 (f0 9f 8e 89), unlike UTF-16 or locale-aware orders.
    keys = [
        "é",
        "z",
        "Z",
        "a",
        "e",
        "f",
        "ab",
        "abc",
        "b",
        "A",
        "日",
        "\uffff",
        "🎉",
        "\ue000",
        "~",
        "1",
        "10",
        "9",
    ]
    shuffled = keys[:]
    random.Random(5).shuffle(shuffled)
    for key in shuffled:
        assert shared.put(ns + key, b"v " + key.encode()).status == 201
    expected = sorted(key.encode() for key in keys)
    assert [key for key, _ in scan_ns(shared, ns)] == expected
    assert scan_ns(shared, ns) == [(key, b"v " + key) for key in expected]
    # bounds are compared as bytes too, and may be any UTF-8 text
    assert [key.decode() for key, _ in scan_ns(shared, ns, "z", "日")] == ["z", "~", "é"]
    assert [key.decode() for key, _ in scan_ns(shared, ns, "\ue000")] == ["\ue000", "\uffff", "🎉"]
    assert [key.decode() for key, _ in scan_ns(shared, ns, "Z", "a")] == ["Z"]


def test_scan_excludes_tombstones(shared: Node, ns: str) -> None:
    for key in ("a", "b", "c", "d"):
        assert shared.put(ns + key, key.encode()).status == 201
    assert shared.delete(ns + "b").status == 202
    assert shared.delete(ns + "d").status == 202
    assert shared.delete(ns + "never-written").status == 202
    assert scan_ns(shared, ns) == [(b"a", b"a"), (b"c", b"c")]
    assert shared.put(ns + "b", b"again").status == 201
    assert scan_ns(shared, ns) == [(b"a", b"a"), (b"b", b"again"), (b"c", b"c")]


# --- a large scan streams ---------------------------------------------------------------------------

SCAN_RECORDS = 50_000
SCAN_VALUE_BYTES = 2048  # 50,000 x 2 KiB = ~100 MiB streamed, against a 40 MiB bound on memory growth
SCAN_RSS_GROWTH_LIMIT = 40 * 1024 * 1024


def scan_value(number: int) -> bytes:
    # compressible, so LevelDB's files (and their pages mapped into the node) stay small: what the node
    # holds in memory is then what it buffered of the response
    return (b"%06d|" % number * (SCAN_VALUE_BYTES // 7 + 1))[:SCAN_VALUE_BYTES]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def iter_chunks(stream: BinaryIO) -> Iterator[bytes]:
    """The chunks of a chunked body, read as they are needed."""
    while (size := int(stream.readline().split(b";")[0], 16)) > 0:
        chunk = stream.read(size)
        assert len(chunk) == size, "the body ended inside a chunk"
        assert stream.read(2) == b"\r\n"
        yield chunk
    assert stream.readline() == b"\r\n"


def test_scan_of_50k_records_streams_them_all_in_order_in_bounded_memory(node: Node) -> None:
    node.stop()
    # written in key order, which LevelDB takes fastest; the other scan tests cover the ordering
    storage = Storage.open(node.config.data_dir, fsync=False)
    try:
        for timestamp, number in enumerate(range(SCAN_RECORDS), 1):
            storage.apply(b"key-%06d" % number, Record.put(timestamp, scan_value(number)))
        storage.apply(b"key-000100", Record.delete(SCAN_RECORDS + 1))  # one tombstone among them
    finally:
        storage.close()
    node.start()
    assert node.process is not None
    pid = node.process.pid
    assert request(node.url, "GET", "/v0/status").status == 200
    baseline = rss_bytes(pid)

    parsed = urllib.parse.urlsplit(node.url)
    assert parsed.hostname is not None and parsed.port is not None
    peak = baseline
    received = 0
    started = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # a small receive buffer, so what the client has not read yet stays on the node's side
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.settimeout(60)
        sock.connect((parsed.hostname, parsed.port))
        sock.sendall(f"GET {ENTITIES}?start=key- HTTP/1.1\r\nHost: {parsed.netloc}\r\n\r\n".encode())
        stream = cast(BinaryIO, sock.makefile("rb", buffering=64 * 1024))
        assert stream.readline().split()[1] == b"200"
        headers = []
        while (line := stream.readline()) != b"\r\n":
            headers.append(line.lower())
        assert b"transfer-encoding: chunked\r\n" in headers
        expected = (number for number in range(SCAN_RECORDS) if number != 100)
        for chunk, number in zip(iter_chunks(stream), expected, strict=True):
            assert chunk == b"key-%06d\n" % number + scan_value(number), (number, chunk[:40])
            received += 1
            if received % 500 == 0:
                peak = max(peak, rss_bytes(pid))
        peak = max(peak, rss_bytes(pid))
    assert received == SCAN_RECORDS - 1
    assert time.monotonic() - started < 120
    growth = peak - baseline
    data = received * SCAN_VALUE_BYTES
    assert data > 2 * SCAN_RSS_GROWTH_LIMIT  # the bound means something: the data would not fit under it
    assert growth < SCAN_RSS_GROWTH_LIMIT, (
        f"node RSS grew by {growth / 2**20:.1f} MiB during a scan of {data / 2**20:.0f} MiB "
        f"(from {baseline / 2**20:.1f} MiB)"
    )
    assert node.get("key-049999").body == scan_value(49_999)  # and the node still serves
