"""A node's parts opened and closed (kvnode.node.wiring) in this process: the membership it runs with
stored at the first start and kept over --cluster after it, everything closed at the end (the data dir
opens again), and a start that cannot be made refused before it opened anything."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvnode.access.client_auth import BadTokensFile
from kvnode.access.tls import TlsUnusable
from kvnode.config import NodeConfig
from kvnode.node.wiring import open_parts
from kvnode.storage.keyspace import StorageUnavailable

A, B, C = "http://127.0.0.1:7001", "http://127.0.0.1:7002", "http://127.0.0.1:7003"


def member(data_dir: Path, cluster: tuple[str, ...], url: str = A) -> NodeConfig:
    port = int(url.rsplit(":", 1)[1])
    return NodeConfig(data_dir=data_dir, port=port, cluster=cluster, timeout_ms=200)


async def test_the_membership_is_stored_at_the_first_start_and_kept_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_parts(member(tmp_path, (A, B))) as parts:
        assert parts.membership.urls == (A, B) and [peer.url for peer in parts.peers] == [B]
        assert parts.system.membership.load() == parts.membership
    with caplog.at_level(logging.WARNING):
        async with open_parts(member(tmp_path, (A, B, C))) as parts:  # the data dir opens again
            assert parts.membership.urls == (A, B)
    assert "--cluster differs from the stored membership (version 1), which this node keeps" in caplog.text


async def test_a_node_that_is_not_a_member_of_its_stored_cluster_is_refused(tmp_path: Path) -> None:
    async with open_parts(member(tmp_path, (A, B))):
        pass
    with pytest.raises(StorageUnavailable) as refused:
        async with open_parts(member(tmp_path, (C,), url=C)):
            pass
    assert str(refused.value) == (
        f"{C} is not a member of the cluster stored in {tmp_path} ({A},{B}): start it with its member URL, "
        "or with another data dir"
    )


async def test_unusable_tls_or_tokens_files_are_refused_before_the_data_dir_is_made(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    data_dir = tmp_path / "data"
    https = NodeConfig(data_dir=data_dir, tls_cert=missing, tls_key=missing, tls_ca=missing)
    with pytest.raises(TlsUnusable):
        async with open_parts(https):
            pass
    with pytest.raises(BadTokensFile):
        async with open_parts(NodeConfig(data_dir=data_dir, auth_tokens_file=missing)):
            pass
    assert not data_dir.exists()
