"""loadtest.replica_calls: the nodes' replica-call counters read from /metrics and differenced."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from loadtest.replica_calls import REQUEST_OPS, calls_made, replica_calls


@pytest.fixture
def metrics_server() -> Iterator[tuple[Callable[..., None], str]]:
    """A /metrics endpoint rendered by prometheus_client, as a node's is: (add(peer, outcome, n, op="write"),
    url)."""
    registry = CollectorRegistry()
    calls = Counter("kvnode_replica_calls", "replica calls", ["peer", "op", "outcome"], registry=registry)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield (
            lambda peer, outcome, n, op="write": calls.labels(peer=peer, op=op, outcome=outcome).inc(n),
            f"http://127.0.0.1:{server.server_address[1]}",
        )
    finally:
        server.shutdown()
        server.server_close()


def test_replica_calls_are_read_from_the_counters_and_differenced(
    metrics_server: tuple[Callable[..., None], str],
) -> None:
    add, url = metrics_server
    add("a", "ok", 5)
    before = replica_calls([url, "http://127.0.0.1:9"])  # a node that is down is skipped
    add("a", "ok", 200)
    add("b", "ok", 95)
    add("c", "timeout", 5)
    after = replica_calls([url])
    assert before == {"ok": 5}
    assert calls_made(before, after, requests=100) == {
        "total": 300,
        "per_request": 3.0,
        "by_outcome": {"ok": 295, "timeout": 5},
    }


def test_replica_calls_are_none_where_no_node_exposes_them() -> None:
    assert replica_calls(["http://127.0.0.1:9"]) is None
    assert calls_made(None, None, requests=100) is None


def test_only_the_ops_asked_for_are_summed(metrics_server: tuple[Callable[..., None], str]) -> None:
    """Clock probes, hints and repairs go on whatever the load: a request's calls leave them out."""
    add, url = metrics_server
    add("a", "ok", 3, "read")
    add("a", "ok", 2, "write")
    add("a", "ok", 50, "clock")
    add("b", "ok", 7, "repair")
    assert replica_calls([url], REQUEST_OPS) == {"ok": 5}
    assert replica_calls([url]) == {"ok": 62}


def test_only_the_calls_to_the_peers_asked_for_are_summed(
    metrics_server: tuple[Callable[..., None], str],
) -> None:
    """A coordinator's calls to its own storage are no replica's work: the bench's per-call figure leaves
    them out."""
    add, url = metrics_server
    add("self", "ok", 10, "read")
    add("b", "ok", 4, "read")
    add("c", "ok", 6, "write")
    assert replica_calls([url], REQUEST_OPS, peers=["b", "c"]) == {"ok": 10}
