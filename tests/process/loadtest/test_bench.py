"""loadtest.bench: its report's figures, and its servers: a real cluster started, filled and stopped."""

from __future__ import annotations

from pathlib import Path

from kvnode.access.tls import verifying_context
from loadtest.targets import fill_cluster, kvnode_cluster
from loadtest.workload import key_name
from tests.harness import needs_openssl, request


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
