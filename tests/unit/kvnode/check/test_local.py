"""Each fault kind on a local cluster, and its end, as the nodes are asked to do them (nodes that record what
they are asked: the real ones are started, killed, frozen, restarted, joined and left by
tests/cluster/test_check.py): a victim among the members, the clock's offset drawn, a membership change that
joins, then makes the newcomer leave; partitions and full disks said unavailable without their means."""

from __future__ import annotations

import random
from pathlib import Path

from kvnode.check.local import CLOCK_OFFSETS_MS, LocalFaults, LocalNodes

MEMBERS = ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]


class Recording(LocalNodes):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, 3, 3)
        self.members = list(MEMBERS)
        self.asked: list[str] = []

    def kill(self, url: str) -> None:
        self.asked.append(f"kill {url}")

    def revive(self, url: str) -> None:
        self.asked.append(f"revive {url}")

    def freeze(self, url: str) -> None:
        self.asked.append(f"freeze {url}")

    def resume(self, url: str) -> None:
        self.asked.append(f"resume {url}")

    def restart(self, url: str, clock_offset_ms: int = 0) -> None:
        self.asked.append(f"restart {url} {clock_offset_ms}")

    def join(self) -> str:
        self.members.append("http://127.0.0.1:4")
        self.joined.append("http://127.0.0.1:4")
        return "http://127.0.0.1:4"

    def leave(self, url: str) -> None:
        self.members.remove(url)
        self.joined.remove(url)
        self.asked.append(f"leave {url}")


def test_each_fault_is_done_to_a_member_and_undone_at_its_end(tmp_path: Path) -> None:
    nodes = Recording(tmp_path)
    faults = LocalFaults(nodes, "")
    rng = random.Random(2)
    for kind, done, undone in (("kill", "kill", "revive"), ("pause", "freeze", "resume")):
        fault = faults.begin(kind, rng)
        assert fault.target in MEMBERS and nodes.asked[-1] == f"{done} {fault.target}"
        faults.end(fault)
        assert nodes.asked[-1] == f"{undone} {fault.target}"
    clock = faults.begin("clock", rng)
    offset = int(nodes.asked[-1].split()[-1])
    assert abs(offset) in CLOCK_OFFSETS_MS and clock.note == f"clock {offset:+d} ms"
    faults.end(clock)
    assert nodes.asked[-1] == f"restart {clock.target} 0"


def test_a_membership_change_joins_then_the_newcomer_leaves(tmp_path: Path) -> None:
    nodes = Recording(tmp_path)
    faults = LocalFaults(nodes, "")
    joined = faults.begin("membership", random.Random(1))
    assert (joined.target, joined.note, joined.done) == ("http://127.0.0.1:4", "joined", True)
    assert faults.targets() == [*MEMBERS, "http://127.0.0.1:4"]
    left = faults.begin("membership", random.Random(1))
    assert (left.target, left.note) == ("http://127.0.0.1:4", "left") and faults.targets() == MEMBERS


def test_partitions_and_full_disks_without_their_means_are_unavailable(tmp_path: Path) -> None:
    faults = LocalFaults(Recording(tmp_path), "they need root")
    assert faults.unavailable("partition") == "partition skipped: they need root"
    assert faults.unavailable("disk") == "disk skipped: they need root"
    assert faults.unavailable("kill") == ""
