"""Hosts made of network namespaces: addresses and the commands of a cut; whether they can be made here; and,
as root, hosts built, cut apart and mended in a child process's own mount namespace, nothing of them left on
the machine once it ends."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kvnode.check.netns import Hosts, address, cut_commands, isolation_unavailable
from tests.harness import REPO


def test_a_cut_is_a_blackhole_route_each_way_and_a_mend_deletes_both() -> None:
    assert [address(host) for host in range(3)] == ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
    assert cut_commands("p", 1, 0, "del") == [
        ["ip", "-n", "p-h1", "route", "del", "blackhole", "198.51.100.1/32"],
        ["ip", "-n", "p-h0", "route", "del", "blackhole", "198.51.100.2/32"],
    ]
    assert Hosts("p").wrap(["python", "-m", "kvnode", "node"], 2) == [
        "ip", "netns", "exec", "p-h2", "python", "-m", "kvnode", "node"
    ]  # fmt: skip


def test_without_root_partitions_and_full_disks_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert isolation_unavailable() == "they need root"


SCRIPT = textwrap.dedent(
    """
    import subprocess
    from kvnode.check.netns import Hosts, enter_private_mounts

    def routes(host):
        return subprocess.run(["ip", "-n", f"kvtest-h{host}", "route"], capture_output=True, text=True).stdout

    enter_private_mounts()
    hosts = Hosts("kvtest")
    hosts.build(2)
    hosts.cut(0, [1])
    assert "blackhole 198.51.100.2" in routes(0) and "blackhole 198.51.100.1" in routes(1), routes(0)
    hosts.mend(0, [1])
    assert "blackhole" not in routes(0) + routes(1)
    hosts.enter_client()
    addresses = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert "198.51.100.100/24" in addresses, addresses
    print("built, cut, mended, entered")
    """
)


@pytest.mark.skipif(bool(isolation_unavailable()), reason=isolation_unavailable() or "-")
def test_hosts_are_built_cut_mended_and_gone_with_their_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "built, cut, mended, entered"
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "kvtest" not in left
