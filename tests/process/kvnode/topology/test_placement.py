"""kvnode.topology.placement in another process: the same order under another hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kvnode.topology.placement import Placement

MEMBERS = [f"http://127.0.0.1:{port}" for port in range(8080, 8085)]
KEYS = [b"", "ключ".encode(), b"\x00\xff" * 40, *(f"k{i}".encode() for i in range(200))]


def test_same_order_in_a_subprocess_with_another_hash_seed() -> None:
    """Not Python's salted hash(): another interpreter with other hash seeds agrees on every key."""
    script = (
        "import json, sys\n"
        "from kvnode.topology.placement import Placement\n"
        "nodes, keys = json.loads(sys.stdin.read())\n"
        "p = Placement(nodes)\n"
        "print(json.dumps([p.order(bytes.fromhex(k)) for k in keys]))\n"
    )
    local = Placement(MEMBERS)
    expected = [local.order(key) for key in KEYS]
    payload = json.dumps([MEMBERS, [key.hex() for key in KEYS]])
    for seed in ("0", "1", "12345"):
        result = subprocess.run(
            [sys.executable, "-c", script],
            input=payload,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        assert json.loads(result.stdout) == expected, f"PYTHONHASHSEED={seed}"
