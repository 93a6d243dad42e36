"""The workloads: what each asks next (fresh set elements, reads of acknowledged ones, removals of present
ones; unique register values; conditional writes from the versions a worker saw) and how it asks it, against
a stand-in cluster that follows the contract (tests/faulty_servers.py)."""

from __future__ import annotations

import random

from kvnode.check import linearizable, register, set_full
from kvnode.check.calls import Caller
from kvnode.check.workloads import WORKLOADS, CasWorkload, Invocation, RegisterWorkload, SetWorkload
from tests.faulty_servers import serving


def test_every_workload_is_named_once() -> None:
    assert set(WORKLOADS) == {"set", "register", "cas"}
    assert all(WORKLOADS[name]("p", 1).name == name for name in WORKLOADS)


async def test_the_set_adds_fresh_elements_reads_acknowledged_ones_and_removes_each_at_most_once() -> None:
    workload = SetWorkload("p", keys=0)
    rng = random.Random(3)
    async with serving() as server, Caller() as caller:
        for worker in range(200):
            invocation = workload.next_invocation(worker, rng)
            done = await workload.perform(worker, invocation, caller, server.url)
            assert done.type == "ok", (invocation, done)
    adds = [key for key in server.first]
    finals = workload.final_reads()
    assert [read.key for read in finals] == adds and {read.f for read in finals} == {set_full.FINAL_READ}
    assert len(adds) == len(set(adds)) > 50
    removed = [key for key, (_, value) in server.versions.items() if value is None]
    assert removed and len(removed) < len(adds)


def test_register_values_are_unique_across_workers() -> None:
    workload = RegisterWorkload("p", keys=3)
    rng = random.Random(1)
    values = [
        i.value for i in (workload.next_invocation(w % 4, rng) for w in range(100)) if i.f == register.WRITE
    ]
    assert len(values) == len(set(values)) > 20
    assert all(i.key.startswith("p-register-") for i in (workload.next_invocation(0, rng) for _ in range(10)))


async def test_cas_writes_from_the_version_last_seen_and_a_stale_one_is_refused() -> None:
    workload = CasWorkload("p", keys=1)
    key = "p-cas-0"
    async with serving() as server, Caller() as caller:

        async def perform(worker: int, invocation: Invocation) -> tuple[str, str]:
            done = await workload.perform(worker, invocation, caller, server.url)
            return done.type, done.error

        assert await perform(0, Invocation(linearizable.CAS_READ, key)) == ("ok", "")
        assert await perform(1, Invocation(linearizable.CAS_READ, key)) == ("ok", "")
        assert await perform(0, Invocation(linearizable.CAS_CREATE, key, "c0")) == ("ok", "")
        # worker 1 saw the key absent: its creation is refused now
        assert await perform(1, Invocation(linearizable.CAS_CREATE, key, "c1")) == (
            "fail",
            "precondition-failed",
        )
        assert await perform(0, Invocation(linearizable.CAS_WRITE, key, ["c0", "c2"])) == ("ok", "")
        # worker 0 still knows c0's version: If-Match it, and be refused
        assert await perform(0, Invocation(linearizable.CAS_WRITE, key, ["c0", "c3"])) == (
            "fail",
            "precondition-failed",
        )
        assert await perform(0, Invocation(linearizable.CAS_READ, key)) == ("ok", "")
        assert await perform(0, Invocation(linearizable.CAS_DELETE, key, "c2")) == ("ok", "")
    assert server.versions[key][1] is None


def test_a_cas_worker_reads_before_it_writes_a_key_it_knows_nothing_of() -> None:
    workload = CasWorkload("p", keys=2)
    rng = random.Random(5)
    assert {workload.next_invocation(0, rng).f for _ in range(20)} == {linearizable.CAS_READ}
