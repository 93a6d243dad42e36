"""A full disk: writes answered 507 in one line, reads served, and the node writable again by itself once
space is freed; a node started on a full disk says so in one line; in a cluster, the writes a replica
refused for its full disk are hinted and reach it once space is freed. The data dir is a small tmpfs
mounted in a mount namespace of the node's own (``unshare -rm``); where that is not allowed, the tests
skip."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvnode.config import NodeConfig
from kvnode.ops.local_cluster import start_local_cluster
from kvnode.ops.ports import free_ports
from kvnode.ops.processes import stop_processes
from tests.harness import DEADLINE, Node, clean_env, fresh_key, request, serves, stats, wait_for

DISK_MIB = 16


def _can_mount(tmp_path: Path) -> str:
    """ "" when a tmpfs can be mounted in a namespace of our own here; else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) here"
    point = tmp_path / "probe"
    point.mkdir()
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {point}"],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    return "" if result.returncode == 0 else f"cannot mount a tmpfs in a namespace: {result.stderr.strip()}"


@pytest.fixture
def mountable(tmp_path: Path) -> None:
    """Skips the test where a tmpfs cannot be mounted in a namespace of our own."""
    reason = _can_mount(tmp_path)
    if reason:
        pytest.skip(reason)


@pytest.fixture
def disk(mountable: None, tmp_path: Path) -> Path:
    """Where the tmpfs goes (mounted by each test's own ``unshare``)."""
    point = tmp_path / "disk"
    point.mkdir()
    return point


def _in_namespace(disk: Path, then: str) -> list[str]:
    """A command line that mounts a DISK_MIB tmpfs at ``disk``, in a namespace of its own, then runs
    ``then`` (a shell command) there."""
    mount = f"mkdir -p {disk} && mount -t tmpfs -o size={DISK_MIB}m tmpfs {disk}"
    return ["unshare", "-rm", "sh", "-c", f"{mount} && {then}"]


@pytest.fixture
def node_on_tmpfs(disk: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A node whose data dir is on the tmpfs: its URL, and the tmpfs as the test sees it (through the
    node's /proc/PID/root, since the mount exists only in the node's namespace)."""
    port = free_ports(1)[0]
    node = f"exec {sys.executable} -m kvnode node --port {port} --data-dir {disk}/data"
    with open(tmp_path / "node.log", "wb") as log:
        process = subprocess.Popen(_in_namespace(disk, node), env=clean_env(), stdout=log, stderr=log)
    try:
        wait_for(lambda: serves(port), DEADLINE, "the node to serve")
        yield f"http://127.0.0.1:{port}", Path(f"/proc/{process.pid}/root{disk}")
    finally:
        stop_processes([process])


def _fill(disk: Path) -> Path:
    """A file that takes every free byte of ``disk``."""
    filler = disk / "filler"
    # Unbuffered: a write that fits only in part leaves nothing behind for close() to fail on.
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_a_full_disk_answers_writes_507_serves_reads_and_recovers_once_space_is_freed(
    node_on_tmpfs: tuple[str, Path],
) -> None:
    url, disk = node_on_tmpfs
    value = b"v" * 100_000

    def put(key: str) -> int:
        return request(url, "PUT", "/v0/entity", {"id": key}, body=value).status

    assert put("before") == 201
    filler = _fill(disk)
    answer = request(url, "PUT", "/v0/entity", {"id": "during"}, body=value)
    assert answer.status == 507, answer
    assert answer.text.count("\n") == 1 and "disk full" in answer.text, answer.text
    assert request(url, "DELETE", "/v0/entity", {"id": "before"}).status == 507
    got = request(url, "GET", "/v0/entity", {"id": "before"})
    assert got.status == 200 and got.body == value
    filler.unlink()
    wait_for(lambda: put("after") == 201, what="writes to succeed again")
    assert request(url, "GET", "/v0/entity", {"id": "before"}).body == value
    assert request(url, "GET", "/v0/entity", {"id": "after"}).body == value


def test_a_node_started_on_a_full_disk_says_so_in_one_line(disk: Path) -> None:
    port = free_ports(1)[0]
    fill = f"(cat /dev/zero > {disk}/filler 2>/dev/null; true)"
    node = f"exec {sys.executable} -m kvnode node --port {port} --data-dir {disk}/data"
    result = subprocess.run(
        _in_namespace(disk, f"{fill} && {node}"),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert result.returncode == 2, (result.returncode, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"kvnode: cannot open data dir {disk}/data: the disk is full"), result.stderr


def _cluster_with_a_node_on_tmpfs(tmp_path: Path) -> list[Node]:
    """Three nodes, the first with its data dir on a tmpfs of its own. They are loose nodes, which
    conftest stops when the test ends."""
    on_tmpfs = "on-tmpfs"

    def configure(index: int, config: NodeConfig, _: list[int]) -> NodeConfig:
        return (
            dataclasses.replace(config, data_dir=config.data_dir.with_name(on_tmpfs))
            if index == 0
            else config
        )

    def make_node(config: NodeConfig, log_path: Path | None) -> Node:
        node = Node(config, log_path)
        if config.data_dir.name == on_tmpfs:
            node.argv = _in_namespace(config.data_dir, f"exec {shlex.join(node.argv)}")
        return node

    base = NodeConfig(data_dir=tmp_path / "cluster", timeout_ms=1000)
    return start_local_cluster(base, 3, make_node, log_dir=tmp_path, configure=configure).nodes


VALUE = b"v" * 100_000  # more than the log's last page: a write of it needs space


def _filled(node: Node) -> Path:
    """Fill the disk of ``node``, the cluster's node on a tmpfs; the filler, to unlink to free it."""
    return _fill(Path(f"/proc/{node.pid}/root{node.config.data_dir}"))


@pytest.mark.usefixtures("mountable")
def test_writes_a_replica_refused_for_a_full_disk_are_hinted_and_reach_it_once_space_is_freed(
    tmp_path: Path,
) -> None:
    full, coordinator, _ = _cluster_with_a_node_on_tmpfs(tmp_path)
    filler, keys = _filled(full), [fresh_key("hinted") for _ in range(10)]
    for key in keys:
        assert coordinator.put(key, VALUE, ack=2, from_=3).status == 201

    def hints() -> dict[str, int]:
        return {name: counts.get(full.url, 0) for name, counts in stats(coordinator)["hints"].items()}

    wait_for(lambda: hints()["kept"] == len(keys), what="a hint kept for each refused write")
    assert hints()["delivered"] == 0
    filler.unlink()
    # Only hints can bring them: no key is read (no read repair), and anti-entropy runs hourly.
    wait_for(lambda: hints()["delivered"] == len(keys), DEADLINE, "the hints to be delivered")
    assert hints()["pending"] == 0
    held = dict(full.scan("hinted-", "hinted."))
    assert held == dict.fromkeys((key.encode() for key in keys), VALUE)


@pytest.mark.usefixtures("mountable")
def test_writes_the_coordinators_own_full_disk_refused_reach_it_once_space_is_freed(tmp_path: Path) -> None:
    """Issue 41's second hole: acknowledged by the two peers, but the coordinator's own copy was neither
    stored nor hinted (the hints are on the full disk) and nothing brought it until the hourly repair."""
    full, _, _ = _cluster_with_a_node_on_tmpfs(tmp_path)
    filler, keys = _filled(full), [fresh_key("own-copy") for _ in range(10)]
    for key in keys:
        assert full.put(key, VALUE, ack=2, from_=3).status == 201
    assert full.scan("own-copy-", "own-copy.") == []
    filler.unlink()
    # No key is read (no read repair), and anti-entropy runs hourly: the node fetches them by itself.
    wanted = dict.fromkeys((key.encode() for key in keys), VALUE)
    wait_for(lambda: dict(full.scan("own-copy-", "own-copy.")) == wanted, DEADLINE, "the refused writes")
    wait_for(lambda: "have been made good by a repair" in full.log_path.read_text(), what="the mark cleared")
