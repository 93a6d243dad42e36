"""A small concurrent soak: many clients, overlapping keys, every coordinator; no acknowledged write lost.

32 asyncio clients write (one writer per key at a time, so the per-key order of writes is known) and read
200 keys through the three coordinators of a cluster with the default quorum (ack=2, from=3), for about
20 s, once with equal clocks and once with the nodes' clocks at -1/0/+1 s. During the run every read
must see a version at least as new as the last write acknowledged before the read started (quorum
intersection) and no newer than the last one issued. Afterwards every key reads, with ack=3&from=3, its
last acknowledged write (404 if that was a DELETE); only a later write that was not acknowledged (504, a
write that may still have been applied) may stand in its place.

Then the same under a nemesis (each node in turn killed with SIGKILL and restarted, frozen, or wiped,
each time for longer than the hint window, with a 4th node joining and then leaving between the faults),
after which anti-entropy alone must make every replica's own listing identical.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from kvnode.ops.ports import free_ports
from tests.harness import Cluster, ClusterFactory, Node, run_kvnode, stats, wait_for

pytestmark = pytest.mark.soak

SOAK_SECONDS = 20.0
CLIENTS = 32
KEYS = 200
MAX_OPERATIONS = 100_000  # a bound on the count as well as on the time
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=15)


@dataclass
class KeyHistory:
    """Every write issued for one key, in order: a value, or None for a DELETE. Index 0 is 'never written'."""

    writes: list[bytes | None] = field(default_factory=lambda: [None])
    acknowledged: int = 0  # index of the last acknowledged write
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def issued(self) -> int:
        return len(self.writes) - 1


@dataclass
class Soak:
    urls: list[str]
    keys: dict[str, KeyHistory]
    deadline: float
    outcomes: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    @property
    def operations(self) -> int:
        return sum(self.outcomes.values())

    async def client(self, session: aiohttp.ClientSession, seed: int) -> None:
        rng = random.Random(seed)
        names = list(self.keys)
        while time.monotonic() < self.deadline and self.operations < MAX_OPERATIONS:
            key = rng.choice(names)
            url = rng.choice(self.urls)
            roll = rng.random()
            if roll < 0.5:
                await self.read(session, url, key)
            else:
                await self.write(session, url, key, delete=roll > 0.9, rng=rng)

    async def write(
        self, session: aiohttp.ClientSession, url: str, key: str, *, delete: bool, rng: random.Random
    ) -> None:
        history = self.keys[key]
        async with history.lock:  # one writer per key at a time: the order of writes is the issue order
            index = history.issued + 1
            value = None if delete else f"{key}#{index}#".encode() + rng.randbytes(rng.randint(0, 64))
            history.writes.append(value)
            method = "DELETE" if delete else "PUT"
            try:
                async with session.request(
                    method, f"{url}/v0/entity", params={"id": key}, data=value
                ) as reply:
                    await reply.read()
                    status = reply.status
            except (aiohttp.ClientError, TimeoutError) as error:
                self.outcomes[f"{method} {type(error).__name__}"] += 1
                return
            self.outcomes[f"{method} {status}"] += 1
            if status == (202 if delete else 201):
                history.acknowledged = index
            elif status != 504:
                self.violations.append(f"{method} {key} via {url} answered {status}")

    async def read(self, session: aiohttp.ClientSession, url: str, key: str) -> None:
        history = self.keys[key]
        floor = history.acknowledged
        try:
            async with session.get(f"{url}/v0/entity", params={"id": key}) as reply:
                body = await reply.read()
                status = reply.status
        except (aiohttp.ClientError, TimeoutError) as error:
            self.outcomes[f"GET {type(error).__name__}"] += 1
            return
        self.outcomes[f"GET {status}"] += 1
        if status == 504:
            return
        ceiling = history.issued
        problem = check_visible(history, key, status, body, floor, ceiling)
        if problem:
            self.violations.append(f"GET {key} via {url}: {problem}")


def check_visible(
    history: KeyHistory, key: str, status: int, body: bytes, floor: int, ceiling: int
) -> str | None:
    """None if (status, body) is a write with index in [floor, ceiling]; else what is wrong with it."""
    if status == 404:
        if any(history.writes[index] is None for index in range(floor, ceiling + 1)):
            return None
        return f"404, but writes {floor}..{ceiling} are all values"
    if status != 200:
        return f"status {status}"
    prefix, _, rest = body.partition(b"#")
    index_text, _, _ = rest.partition(b"#")
    if prefix != key.encode() or not index_text.isdigit():
        return f"a value never written to this key: {body[:80]!r}"
    index = int(index_text)
    if not floor <= index <= ceiling:
        return f"saw write {index}, outside {floor}..{ceiling} (last acknowledged before the read: {floor})"
    if history.writes[index] != body:
        return f"write {index}'s value is corrupted: {body[:80]!r}"
    return None


async def run_soak(urls: list[str], seconds: float) -> Soak:
    soak = Soak(urls, {f"soak-{i:03d}": KeyHistory() for i in range(KEYS)}, time.monotonic() + seconds)
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(connector=connector, timeout=REQUEST_TIMEOUT) as session:
        await asyncio.gather(*(soak.client(session, seed) for seed in range(CLIENTS)))
    return soak


async def final_state(urls: list[str], soak: Soak) -> list[str]:
    """Read every key with ack=3&from=3 and compare with its history; the mismatches."""
    problems: list[str] = []
    async with aiohttp.ClientSession(timeout=REQUEST_TIMEOUT) as session:
        for position, (key, history) in enumerate(soak.keys.items()):
            url = urls[position % len(urls)]
            async with session.get(f"{url}/v0/entity", params={"id": key, "ack": "3", "from": "3"}) as reply:
                body, status = await reply.read(), reply.status
            # The last acknowledged write, or a later one that answered 504 and may have been applied.
            problem = check_visible(history, key, status, body, history.acknowledged, history.issued)
            if problem:
                problems.append(f"{key} via {url}: {problem}")
            elif history.acknowledged == history.issued:
                expected = history.writes[history.acknowledged]
                if (status, body) != ((404, body) if expected is None else (200, expected)):
                    problems.append(f"{key}: not its last acknowledged write")
    return problems


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "clock_offsets_ms", [(0, 0, 0), (-1000, 0, 1000)], ids=["same-clocks", "skewed-clocks"]
)
def test_concurrent_clients_lose_no_acknowledged_write(
    start_cluster: ClusterFactory, clock_offsets_ms: tuple[int, int, int]
) -> None:
    """With skewed clocks, only the hybrid clock keeps a write made after another acknowledged one the
    newer version: without it, a write through the slow node would be stamped older and lost."""
    cluster = start_cluster(3, clock_offsets_ms=clock_offsets_ms)
    started = time.monotonic()
    soak = asyncio.run(run_soak(cluster.urls, SOAK_SECONDS))
    elapsed = time.monotonic() - started
    summary = f"{soak.operations} operations in {elapsed:.1f}s: {dict(soak.outcomes)}"
    print(summary)
    assert elapsed < SOAK_SECONDS + 20, summary
    assert soak.violations == [], summary
    acknowledged = sum(
        n for outcome, n in soak.outcomes.items() if outcome.endswith((" 200", " 201", " 202"))
    )
    not_found = soak.outcomes["GET 404"]
    assert acknowledged + not_found >= 0.99 * soak.operations, f"too many failed requests: {summary}"
    assert soak.operations >= 1000, f"the soak barely ran: {summary}"
    written = sum(history.issued > 0 for history in soak.keys.values())
    assert written >= KEYS * 0.9, f"only {written} keys were written: {summary}"
    assert asyncio.run(final_state(cluster.urls, soak)) == []
    for node in cluster:
        assert node.process is not None and node.process.poll() is None, f"{node.url} died"


# --- with a nemesis, and anti-entropy healing what it broke ------------------------------------------------

NEMESIS_FAULT_S = 2.0  # how long one fault lasts: longer than the hint window, so hints cannot heal it


# The nemesis's schedule: a join and a leave (of the node that joined) in the middle of the faults.
SCHEDULE = ("kill", "freeze", "join", "wipe", "leave")


def nemesis(cluster: Cluster, newcomer: Node, stop: threading.Event, log: list[str]) -> None:
    """Kill -9 and restart, freeze and resume, or wipe (stop, remove the data dir, start), each node in
    turn, until ``stop`` once the whole SCHEDULE ran; ``newcomer`` joins after the first two faults and
    leaves after the third. Runs on the main thread: a node dies with the thread that started it
    (kvnode.ops.processes.die_with_parent)."""
    for round_ in itertools.count():
        node = cluster[round_ % len(cluster)]
        fault = SCHEDULE[round_] if round_ < len(SCHEDULE) else ("kill", "freeze", "wipe")[round_ % 3]
        log.append(f"{fault} {newcomer.url if fault in ('join', 'leave') else node.url}")
        if fault in ("join", "leave"):
            change(cluster, newcomer, fault)
        elif fault == "freeze":
            node.freeze()
            stop.wait(NEMESIS_FAULT_S)
            node.resume()
        else:
            if fault == "kill":
                node.kill()
            else:
                node.stop()
                shutil.rmtree(node.config.data_dir)
            stop.wait(NEMESIS_FAULT_S)
            node.start()
        if stop.wait(0.5) and round_ >= len(SCHEDULE) - 1:
            return


def change(cluster: Cluster, newcomer: Node, kind: str) -> None:
    """``newcomer`` joins (started with --join), or leaves (admin leave --wait, then stopped)."""
    if kind == "join":
        newcomer.start()
        wait_for(lambda: _settled_with(cluster, newcomer.url), seconds=60, what="the join settled")
        return
    result = run_kvnode(["admin", "--url", cluster[0].url, "leave", newcomer.url, "--wait"], Path.cwd())
    assert result.returncode == 0, result.stderr
    newcomer.stop()


def _settled_with(cluster: Cluster, url: str) -> bool:
    statuses = [node.status() for node in cluster]
    return all(
        status is not None and url in status["cluster"] and not status["joining"] for status in statuses
    )


def own_listings(cluster: Cluster) -> list[dict[bytes, bytes]]:
    return [dict(node.scan("soak-", "soak.")) for node in cluster]


@pytest.mark.timeout(240)
def test_under_a_nemesis_no_acknowledged_write_is_lost_and_anti_entropy_makes_replicas_identical(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(3, hint_window_s=1, repair_interval_s=1)
    [port] = free_ports(1)
    base = cluster[0].config
    joining = dataclasses.replace(
        base, port=port, data_dir=tmp_path / "newcomer", cluster=(), join=cluster.urls[0]
    )
    newcomer = Node(joining, tmp_path / "newcomer.log")
    stop, log = threading.Event(), list[str]()
    soaks: list[Soak] = []

    def clients() -> None:
        try:
            soaks.append(asyncio.run(run_soak(cluster.urls, SOAK_SECONDS)))
        finally:
            stop.set()

    running = threading.Thread(target=clients)
    running.start()
    nemesis(cluster, newcomer, stop, log)
    running.join()
    assert soaks, "the soak's clients failed"
    soak = soaks[0]
    summary = f"{soak.operations} operations: {dict(soak.outcomes)}; nemesis: {log}"
    print(summary)
    assert soak.violations == [], summary
    assert len(log) >= len(SCHEDULE), summary
    healing = time.monotonic()
    wait_for(lambda: all(stats(node)["rebuild"]["state"] == "serving" for node in cluster), seconds=120,
             what="every node serving (a wiped one rebuilt)")  # fmt: skip
    wait_for(lambda: len({tuple(sorted(listing.items())) for listing in own_listings(cluster)}) == 1,
             seconds=120, what="every replica's own listing identical")  # fmt: skip
    converged_s = time.monotonic() - healing
    moved = sum(stats(node)["repair"]["records"]["received"] for node in cluster)
    print(f"replicas identical {converged_s:.1f} s after the nemesis stopped; {moved} records received")
    assert asyncio.run(final_state(cluster.urls, soak)) == []
