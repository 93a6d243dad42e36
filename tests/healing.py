"""Helpers for the tombstone GC tests (test_gc, test_backup, test_cleanup): short GC settings, repairs run
to their end, waiting for tombstones past their grace period, and every version a node holds."""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path
from typing import Any

from kvnode.storage.frames import FrameParser
from kvnode.storage.records import Record, decode
from tests.harness import Node, request, run_kvnode, stats, wait_for

# The shortest grace period (the hint window may not be longer), and short bounds on how late a version
# can reach a replica, which GC waits for too (kvnode.healing.gc_rule).
GC = {"gc_grace_s": 1, "hint_window_s": 1, "timeout_ms": 500, "max_clock_skew_ms": 500}


def gc_figures(node: Node) -> dict[str, Any]:
    figures: dict[str, Any] = stats(node)["gc"]
    return figures


def repair(node: Node, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_kvnode(["admin", "--url", node.url, "repair", "--wait", "--json"], cwd)


def repaired(node: Node, cwd: Path) -> bool:
    """Whether a full repair run on node completed with every peer."""
    return repair(node, cwd).returncode == 0


def repair_all(nodes: list[Node], cwd: Path) -> None:
    """A full repair run on each node in turn, each until it completes with every peer (a peer just
    restarted may not be connected at the first attempt)."""
    for node in nodes:
        wait_for(partial(repaired, node, cwd), what=f"a complete repair on {node.url}")


def past_grace(nodes: list[Node], count: int) -> None:
    """Wait until each node's GC finds ``count`` tombstones past their grace period (waiting or dropped):
    a repair that starts from then on counts for them."""

    def found(node: Node) -> bool:
        figures = gc_figures(node)
        return bool(figures["waiting"] + figures["tombstones_dropped"] >= count)

    wait_for(lambda: all(found(node) for node in nodes), what="the tombstones past their grace period")


def versions_of(node: Node, **bounds: str) -> dict[str, Record]:
    """Every version the node holds (with ``start`` <= key < ``end``), tombstones included, by key."""
    reply = request(node.url, "GET", "/v0/versions", bounds)
    assert reply.status == 200, reply.text
    parser = FrameParser()
    frames = parser.feed(reply.body)
    parser.finish()
    return {key.decode(): decode(raw) for key, raw in frames}
