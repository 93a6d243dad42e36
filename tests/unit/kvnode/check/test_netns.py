"""Hosts made of network namespaces: addresses and the commands of a cut; whether they can be made here; and,
as root, hosts built, cut apart and mended in a child process's own mount namespace, nothing of them left on
the machine once it ends."""

from __future__ import annotations

import pytest

from kvnode.check.netns import Hosts, address, cut_commands, isolation_unavailable


def test_a_cut_is_a_blackhole_route_each_way_and_a_mend_deletes_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kvnode.ops.netns.ip_binary", lambda: "ip")
    assert [address(host) for host in range(3)] == ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
    assert cut_commands("p", 1, 0, "del") == [
        ["ip", "-n", "p-h1", "route", "del", "blackhole", "198.51.100.1/32"],
        ["ip", "-n", "p-h0", "route", "del", "blackhole", "198.51.100.2/32"],
    ]
    assert Hosts("p").wrap(["python", "-m", "kvnode", "node"], 2) == [
        "ip", "netns", "exec", "p-h2", "python", "-m", "kvnode", "node"
    ]  # fmt: skip


def test_without_root_partitions_and_full_disks_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr("kvnode.ops.netns.ip_binary", lambda: "/usr/sbin/ip")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert isolation_unavailable() == "creating network namespaces needs root; this process is not root"


def test_without_mount_partitions_and_full_disks_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr("kvnode.ops.netns.ip_binary", lambda: "/usr/sbin/ip")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert (
        isolation_unavailable() == "no `mount` binary (util-linux): cannot give the check mounts of its own"
    )
