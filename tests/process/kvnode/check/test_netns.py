"""Hosts made of network namespaces: addresses and the commands of a cut; whether they can be made here; and,
as root, hosts built, cut apart and mended in a child process's own mount namespace, nothing of them left on
the machine once it ends."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kvnode.check.netns import isolation_unavailable
from tests.harness import REPO

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
