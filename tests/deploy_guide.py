"""deploy/README.md's steps as tests/cluster/test_deploy.py and tests/cluster/test_k8s.py run them: a shell
block found by the heading above it, run as written in a directory of the test's, and a TLS handshake in
memory that shows whether the certificates a step made verify under a name."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
from pathlib import Path

from tests.harness import DEADLINE, REPO

GUIDE = REPO / "deploy" / "README.md"


def guide_block(heading: str) -> str:
    """The first ``sh`` block of deploy/README.md after ``heading``."""
    guide = GUIDE.read_text()
    match = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S).search(guide, guide.index(heading))
    assert match is not None, f"no sh block after {heading!r}"
    return match.group(1)


def run_block(block: str, home: Path) -> None:
    """Run a shell block with ``home`` as its home and nothing else of this process's environment."""
    done = subprocess.run(
        ["sh", "-euc", block], env={"HOME": str(home), "PATH": os.environ["PATH"]},
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> None:
    """A TLS handshake in memory, the client verifying the server as ``name``; raises ssl.SSLError."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    served = server.wrap_bio(server_in, server_out, server_side=True)
    connecting = client.wrap_bio(client_in, client_out, server_hostname=name)
    done = {"server": False, "client": False}
    for _ in range(10):  # TLS 1.3 takes two round trips; the rest is margin
        for side, end in (("client", connecting), ("server", served)):
            try:
                end.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not end")
