"""loadtest.bench: its report's figures, and its servers: a real cluster started, filled and stopped."""

from __future__ import annotations

from pathlib import Path

from kvnode.access.tls import verifying_context
from loadtest.bench import Row, render_table
from loadtest.targets import fill_cluster, kvnode_cluster
from loadtest.workload import key_name
from loadtest.wrk import Measured, WrkResult, lua_script
from tests.harness import needs_openssl, request


def _row(target: str, cpu: list[float], calls: int | None = None) -> Row:
    result = WrkResult(requests=10_000, requests_per_sec=1_000, p50=0.002, p99=0.004)
    return Row(
        target, "-" if target == "hello-world" else "async", "put", Measured(result, cpu, 1.0, 10.0), calls
    )


def test_without_spread_the_table_gives_coordinator_and_replica_cpu_against_hello_world() -> None:
    """The replicas' CPU is divided by the calls made to them, not by the requests: a GET asks some of
    them only."""
    rows = [_row("hello-world", [0.5]), _row("kvnode", [1.0, 0.3, 0.3], calls=15_000)]
    kvnode = render_table(rows, spread=False).splitlines()[-1]
    assert "| 100 us (2.00x) | 40 us (0.80x) |" in kvnode
    assert kvnode.count("every node") == 0


def test_kvnode_cluster_is_filled_then_stopped(tmp_path: Path) -> None:
    with kvnode_cluster("async", tmp_path) as nodes:
        assert len(nodes) == 3
        fill_cluster(nodes.urls, keys=40, value_size=7, concurrency=4)
        for url in nodes.urls:
            for index in (0, 39):
                response = request(url, "GET", "/v0/entity", {"id": key_name(index)})
                assert (response.status, len(response.body)) == (200, 7)
    assert not any(node.running for node in nodes)


@needs_openssl
def test_a_guarded_cluster_is_filled_over_tls_with_the_token(tmp_path: Path) -> None:
    with kvnode_cluster("async", tmp_path, "tls+tokens") as nodes:
        config = nodes[0].config
        assert config.tls and config.auth_tokens_file is not None
        assert all(url.startswith("https://") for url in nodes.urls)
        fill_cluster(nodes.urls, keys=20, value_size=5, concurrency=4, config=config)
        context = verifying_context(config.tls_ca) if config.tls_ca else None
        answered = request(nodes.urls[1], "GET", "/v0/entity", {"id": key_name(19)}, context=context)
        assert answered.status == 401  # the token is the bench's; a request without it is refused
    assert not any(node.running for node in nodes)


def test_the_wrk_script_sends_the_token_when_given() -> None:
    assert '["Authorization"] = "Bearer t0k"' in lua_script("GET", "/v0/entity", 10, 0, 1, "t0k")
    assert "local headers = nil" in lua_script("GET", "/v0/entity", 10, 0, 1)
