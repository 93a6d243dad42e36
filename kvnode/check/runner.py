"""A whole check: start the local cluster (or reach the running one), drive the workloads' workers and the
nemesis for ``--time`` seconds with a progress line every few seconds, heal the cluster, read back what the
set workload needs, then check the history, write ``history.jsonl``, ``report.md`` and the plots, print one
verdict line per checker and return the exit status (0 valid, 1 invalid, 2 unknown or could not run).

Workers are Jepsen's processes: each sends one request at a time to a node of its own (worker i to target
i modulo their number, the targets following membership changes), pausing between requests so that all
of them together ask about ``--rate`` requests a second; a worker whose request's outcome is unknown goes
on as a new process. The seed draws the workers' operations and the nemesis's faults; what the nodes
answer, and when, it does not fix.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvnode.access.tls import TlsUnusable, verifying_context
from kvnode.check import plots, report
from kvnode.check.calls import Caller
from kvnode.check.history import History, Op, OpType, write_history
from kvnode.check.linearizable import Budget
from kvnode.check.local import LocalFaults, LocalNodes
from kvnode.check.nemesis import Faults, Nemesis, until_stopped
from kvnode.check.netns import Hosts, enter_private_mounts, isolation_unavailable
from kvnode.check.remote import RemoteFaults
from kvnode.check.verdict import EXIT_UNKNOWN, Verdict, exit_status
from kvnode.check.workloads import WORKLOADS, Invocation, Workload
from kvnode.ops.node_http import Unreachable, fetch
from kvnode.ops.processes import NodeStartError

__all__ = ["Options", "check", "run"]

PROGRESS_S = 5.0  # between two progress lines
WORKERS_PER_TARGET = 2  # workers per workload for each node asked
FINAL_READERS = 8
FINAL_READS_S = 60.0  # for the reads after the heal to answer
_RETRY_S = 0.2  # between two tries of a final read
_NODES_DIR_MARK = ".kvnode-check"  # a nodes dir the check made, and may clear for the next run


@dataclass(frozen=True)
class Options:
    """What ``python -m kvnode check`` was asked (kvnode.check.cli parses it)."""

    workloads: Sequence[str]
    nemesis: Sequence[str]
    time_s: float
    rate: float
    keys: int
    out: Path
    seed: int
    command: str  # the command line that runs this check again
    cluster: Sequence[str] = ()  # the running cluster's nodes; none: --local
    nodes: int = 3
    replication_factor: int = 3
    token: str | None = None
    tls_ca: Path | None = None
    search_budget_s: float = 60.0
    request_timeout_s: float = 5.0


def _say(line: str) -> None:
    print(f"check: {line}", flush=True)


def run(options: Options) -> int:
    """The check, from the start of its cluster to its exit status."""
    options.out.mkdir(parents=True, exist_ok=True)
    if options.cluster:
        return asyncio.run(check(options, RemoteFaults(options.cluster, options.token, options.tls_ca)))
    directory = options.out / "nodes"
    if directory.exists() and not (directory / _NODES_DIR_MARK).exists():
        _say(f"{directory} exists and is not a check's: choose another --out")
        return EXIT_UNKNOWN
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    (directory / _NODES_DIR_MARK).touch()
    isolating = {"partition", "disk"} & set(options.nemesis)
    hosts, isolation = _isolate(options) if isolating else (None, "")
    disk = "disk" in isolating and not isolation
    nodes = LocalNodes(directory, options.nodes, options.replication_factor, hosts, disk)
    try:
        nodes.start()
    except (NodeStartError, OSError) as error:
        _say(f"the local cluster did not start: {error}")
        return EXIT_UNKNOWN
    try:
        _say(
            f"{options.nodes} nodes serve (replication factor {options.replication_factor}), data and logs "
            f"in {directory}: {', '.join(nodes.members)}"
        )
        return asyncio.run(check(options, LocalFaults(nodes, isolation)))
    finally:
        nodes.stop()


def _isolate(options: Options) -> tuple[Hosts | None, str]:
    """The means of partitions and full disks (this process's own mounts; with partitions, hosts of
    network namespaces, this process in the client's): the hosts, and why there are none ("" when there
    are)."""
    why = isolation_unavailable()
    if why:
        return None, why
    try:
        enter_private_mounts()  # before any thread starts: this process's mounts, gone when it ends
        if "partition" not in options.nemesis:
            return None, ""
        hosts = Hosts(f"kvcheck-{options.seed}")
        hosts.build(options.nodes)
        hosts.enter_client()
    except OSError as error:
        return None, f"they cannot be made here: {error}"
    return hosts, ""


async def check(options: Options, faults: Faults) -> int:
    """Drive the cluster ``faults`` reaches, check the history, write the report; the exit status."""
    unreachable = await asyncio.to_thread(_unreachable, faults.targets(), options)
    if unreachable:
        _say(unreachable)
        return EXIT_UNKNOWN
    try:
        ssl_context = None if options.tls_ca is None else verifying_context(options.tls_ca)
    except TlsUnusable as error:
        _say(str(error))
        return EXIT_UNKNOWN
    start = time.monotonic_ns()
    history = History(clock=lambda: time.monotonic_ns() - start)
    rng = random.Random(options.seed)
    prefix = f"kvcheck-{int(time.time() * 1000):x}"  # fresh keys each run, on a cluster that may be shared
    workloads = [WORKLOADS[name](prefix, options.keys) for name in options.workloads]
    # Asking a running cluster what it allows is a blocking request: out of the event loop.
    nemesis = await asyncio.to_thread(
        Nemesis, faults, options.nemesis, options.time_s, random.Random(rng.random()), history.now
    )
    for line in nemesis.skipped:
        _say(line)
    async with Caller(options.token, ssl_context, options.request_timeout_s) as caller:
        drive = _Drive(options, faults, history, caller, nemesis)
        await drive.run(workloads, rng)
        await nemesis.heal()
        await drive.final_reads(workloads)
    verdicts = [
        workload.check(history.ops, Budget(options.search_budget_s, time.monotonic)) for workload in workloads
    ]
    return _finish(options, history.ops, verdicts, nemesis)


def _unreachable(targets: Sequence[str], options: Options) -> str:
    """The line that says which target does not answer /v0/status; empty when every one does."""
    for url in targets:
        try:
            fetch(url, options.token, options.tls_ca, "/v0/status")
        except (Unreachable, TlsUnusable) as error:
            return f"cannot run: {error}"
    return ""


class _Drive:
    """The workers, the nemesis and the progress lines of one run."""

    def __init__(self, options: Options, faults: Faults, history: History, caller: Caller, nemesis: Nemesis):
        self._options = options
        self._faults = faults
        self._history = history
        self._caller = caller
        self._nemesis = nemesis
        self._outcomes: Counter[str] = Counter()
        self._stop = asyncio.Event()

    async def run(self, workloads: Sequence[Workload], rng: random.Random) -> None:
        per_workload = max(2, WORKERS_PER_TARGET * len(self._faults.targets()))
        processes = per_workload * len(workloads)
        workers = [
            self._worker(workload, index, processes, random.Random(rng.random()))
            for offset, workload in enumerate(workloads)
            for index in range(offset * per_workload, (offset + 1) * per_workload)
        ]
        tasks = [asyncio.create_task(worker) for worker in workers]
        nemesis = asyncio.create_task(self._nemesis.run(self._stop))
        began = time.monotonic()
        while (left := self._options.time_s - (time.monotonic() - began)) > 0:
            await asyncio.sleep(min(PROGRESS_S, left))
            self._progress(time.monotonic() - began)
        self._stop.set()
        await asyncio.gather(*tasks, nemesis)

    def _progress(self, elapsed: float) -> None:
        outcomes = ", ".join(f"{kind} {self._outcomes[kind]}" for kind in ("ok", "fail", "info"))
        active = self._nemesis.active
        _say(
            f"{elapsed:.0f} s of {self._options.time_s:.0f}: {sum(self._outcomes.values())} operations "
            f"({outcomes}); fault: {active.describe() if active else 'none'}"
        )

    async def _worker(self, workload: Workload, worker: int, processes: int, rng: random.Random) -> None:
        process = worker
        mean_pause = processes / self._options.rate
        await until_stopped(self._stop, rng.uniform(0, mean_pause))
        while not self._stop.is_set():
            invocation = workload.next_invocation(worker, rng)
            targets = self._faults.targets()
            node = targets[worker % len(targets)]
            if await self._perform(workload, worker, process, invocation, node) == "info":
                process += processes  # Jepsen: a process whose operation may still land is done
            await until_stopped(self._stop, rng.expovariate(1 / mean_pause))

    async def _perform(
        self, workload: Workload, worker: int, process: int, invocation: Invocation, node: str
    ) -> OpType:
        """Invoke, perform and complete one operation; its outcome."""
        invoked = self._history.invoke(process, invocation.f, invocation.key, invocation.value)
        done = await workload.perform(worker, invocation, self._caller, node)
        reply = done.reply
        self._history.complete(
            invoked, done.type, done.value, node=node, status=reply.status, error=done.error, etag=reply.etag
        )
        self._outcomes[done.type] += 1
        return done.type

    async def final_reads(self, workloads: Sequence[Workload]) -> None:
        """Each final read tried until it answers, by a few readers, within FINAL_READS_S."""
        queue = [(workload, invocation) for workload in workloads for invocation in workload.final_reads()]
        if not queue:
            return
        _say(f"healed; reading back the {len(queue)} elements the set workload added")
        deadline = time.monotonic() + FINAL_READS_S
        pending = iter(queue)

        async def reader(index: int) -> None:
            process = 1_000_000 + index  # apart from the workers' processes
            for workload, invocation in pending:
                while time.monotonic() < deadline:
                    targets = self._faults.targets()
                    node = targets[index % len(targets)]
                    if await self._perform(workload, -1, process, invocation, node) == "ok":
                        break
                    await asyncio.sleep(_RETRY_S)

        await asyncio.gather(*(reader(index) for index in range(FINAL_READERS)))


def _finish(options: Options, ops: Sequence[Op], verdicts: Sequence[Verdict], nemesis: Nemesis) -> int:
    write_history(ops, options.out / "history.jsonl")
    try:
        drawn = plots.draw(ops, nemesis.windows, options.out)
        missing = ""
    except plots.PlotsUnavailable as error:
        drawn, missing = [], str(error)
        _say(str(error))
    summary = report.Summary(
        command=options.command,
        seed=options.seed,
        where=_where(options),
        seconds=options.time_s,
        ops=ops,
        verdicts=verdicts,
        faults=nemesis.windows,
        skipped=nemesis.skipped,
        errors=nemesis.errors,
        plots=[path.name for path in drawn],
        plots_missing=missing,
    )
    (options.out / "report.md").write_text(report.render(summary))
    for line in nemesis.errors:
        _say(line)
    for verdict in verdicts:
        print(verdict.line(), flush=True)
        for problem in verdict.problems[:5]:
            print(f"  {problem}", flush=True)
    status = exit_status(verdicts)
    _say(f"report in {options.out / 'report.md'}; to run it again: {options.command}")
    return status


def _where(options: Options) -> str:
    if options.cluster:
        return f"the running cluster at {', '.join(options.cluster)}"
    return f"a local cluster of {options.nodes} nodes, replication factor {options.replication_factor}"
