"""Hosts made of network namespaces, the shared mechanics: the `ip` commands a bridge and a host are made
with (recorded, not run: building needs root, and the check's, the bed's and the suite's hosts build them
for real in their own tests), a command's failure named with its complaint, a failed C call with its
errno, and which namespaces are an earlier run's leftovers."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from kvnode.ops import netns
from kvnode.ops.netns import IpCommandFailed, NamespaceHosts, leftover_namespaces, libc_call, run


@pytest.fixture
def ip_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every `ip` command the module runs, recorded instead (`netns delete p-a` fails, as if gone)."""
    runs: list[tuple[str, ...]] = []

    def record(*args: str) -> str:
        runs.append(args)
        if args == ("netns", "delete", "p-a"):
            raise IpCommandFailed("ip netns delete p-a: No such file or directory")
        return ""

    monkeypatch.setattr(netns, "run_ip", record)
    return runs


def test_a_hosts_veth_is_made_in_the_bridges_namespace_with_its_peer_born_in_the_hosts(
    ip_runs: list[tuple[str, ...]],
) -> None:
    hosts = NamespaceHosts("p")
    hosts.add_bridge("br0", "10.9.0.254/24")
    assert hosts.attach("a", "br0", "10.9.0.1/24") == "p-a"
    assert [" ".join(args) for args in ip_runs] == [
        "netns add p-br",
        "-n p-br link set lo up",
        "-n p-br link add br0 type bridge",
        "-n p-br addr add 10.9.0.254/24 dev br0",
        "-n p-br link set br0 up",
        "netns add p-a",
        "-n p-a link set lo up",
        "-n p-br link add va type veth peer name eth0 netns p-a",
        "-n p-br link set va master br0 up",
        "-n p-a addr add 10.9.0.1/24 dev eth0",
        "-n p-a link set eth0 up",
    ]


def test_a_second_bridge_shares_the_bridges_namespace_and_one_without_an_address_gets_none(
    ip_runs: list[tuple[str, ...]],
) -> None:
    hosts = NamespaceHosts("p")
    hosts.add_bridge("br0")
    hosts.add_bridge("br1")
    assert [" ".join(args) for args in ip_runs if "br1" in args or args[0] == "netns"] == [
        "netns add p-br",
        "-n p-br link add br1 type bridge",
        "-n p-br link set br1 up",
    ]
    assert hosts.namespaces == ["p-br"]


def test_remove_deletes_every_namespace_made_last_first_past_one_already_gone(
    ip_runs: list[tuple[str, ...]],
) -> None:
    hosts = NamespaceHosts("p")
    hosts.attach("a", "br0", "10.9.0.1/24")
    hosts.attach("b", "br0", "10.9.0.2/24")
    ip_runs.clear()
    hosts.remove()
    assert ip_runs == [("netns", "delete", "p-b"), ("netns", "delete", "p-a")]
    assert hosts.namespaces == []


def test_a_failed_command_is_named_by_its_program_with_its_complaint(monkeypatch: pytest.MonkeyPatch) -> None:
    complaint = "Cannot open network namespace: Operation not permitted"

    def refuse(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 2, "", f"{complaint}\n")

    monkeypatch.setattr(subprocess, "run", refuse)
    with pytest.raises(IpCommandFailed) as failed:
        run(["/usr/sbin/ip", "netns", "exec", "p-br", "sysctl", "-qw", "net.ipv4.ip_forward=1"])
    assert str(failed.value) == f"ip netns exec p-br sysctl -qw net.ipv4.ip_forward=1: {complaint}"
    assert isinstance(failed.value, OSError)  # the check's callers catch OSError


def test_a_failed_c_call_says_its_name_and_errno() -> None:
    with pytest.raises(OSError) as failed:
        libc_call("setns", -1, 0)
    assert failed.value.errno == errno.EBADF
    assert str(failed.value) == f"[Errno {errno.EBADF}] setns: Bad file descriptor"


def test_without_ip_nothing_runs_and_namespaces_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(netns, "ip_binary", lambda: None)
    with pytest.raises(IpCommandFailed, match="no `ip` binary"):
        netns.inside("p-a", ["true"])
    assert netns.namespaces_unavailable() == "no `ip` binary (iproute2): cannot create network namespaces"


def test_without_root_namespaces_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(netns, "ip_binary", lambda: "/usr/sbin/ip")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert netns.namespaces_unavailable() == (
        "creating network namespaces needs root; this process is not root"
    )


def test_leftovers_are_only_namespaces_of_this_kind_whose_run_is_gone() -> None:
    names = ["kvmh-100-br", "kvmh-100-n1", "kvmh-200-client", "kvmh-x-br", "other-100-br", "kvmh-100"]
    assert leftover_namespaces(names, "kvmh", lambda pid: pid == 200) == ["kvmh-100-br", "kvmh-100-n1"]
    assert leftover_namespaces(names, "kvmh", lambda pid: True) == []
    assert leftover_namespaces(names, "other", lambda pid: False) == ["other-100-br"]
