"""``python -m loadtest.bench``: a fresh 3-node kvnode cluster per fan-out mode under wrk, next to an
aiohttp hello-world (loadtest.hello) driven the same way, printed as one Markdown table.

For each mode the cluster is started with kvnode's own NodeProcesses on free loopback ports, filled
with the GET key space by an aiohttp client, then driven by wrk (GET and PUT on random keys of that
space). One target runs at a time, so the only competition is the machine's other tenants. Every
process started here is stopped by PID (SIGTERM, then SIGKILL after a deadline), also on Ctrl-C or
SIGTERM, and the temporary directory (LevelDB data, wrk scripts and outputs) is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import get_args

import aiohttp

from kvnode.argtypes import choices, non_negative_int, positive_int
from kvnode.config import ClusterConfig, FanoutMode, NodeConfig
from kvnode.local_cluster import NodeProcesses, die_with_parent, stop_processes, wait_until_serving
from loadtest import interruptible
from loadtest.workload import key_name

__all__ = [
    "WrkResult",
    "format_latency",
    "hello_world",
    "kvnode_cluster",
    "lua_script",
    "main",
    "merge_results",
    "parse_time",
    "parse_wrk_output",
    "run_wrk",
    "split_connections",
]

HOST = "127.0.0.1"  # loopback only: nothing here listens on or talks to another machine
NODES = 3
OPS = ("get", "put")
MODES: tuple[str, ...] = get_args(FanoutMode)
QUANTILE_STEPS = 1000  # the wrk script prints latency at every 0.1 %, so --spread can merge histograms

_READY_TIMEOUT = 30.0  # seconds for a node or the hello-world app to answer
_STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL
_WRK_GRACE = 30.0  # seconds a wrk process may run past --duration before it is killed
_FILL_TIMEOUT = 300.0  # seconds the fill may take in all
_FILL_ROUNDS = 4  # the first pass over the keys, then retries of those that failed
_CLUSTER_ATTEMPTS = 3  # free ports found by probing can be taken before a node binds them: retry


class BenchError(Exception):
    """A run that cannot go on; main prints the message as one line and exits 1."""


# --- wrk output -----------------------------------------------------------------------------------

_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}  # wrk's units_time
_TIME = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s|m|h)\s*$")
_RATE = re.compile(r"^\s*Requests/sec:\s*([0-9.]+)\s*$", re.MULTILINE)
_REQUESTS = re.compile(r"^\s*([0-9]+) requests in ", re.MULTILINE)
_PERCENTILE = re.compile(r"^\s*(50|99)(?:\.0+)?%\s+(\S+)\s*$", re.MULTILINE)
_NON_2XX = re.compile(r"^\s*Non-2xx or 3xx responses:\s*([0-9]+)\s*$", re.MULTILINE)
_SOCKET_ERRORS = re.compile(
    r"^\s*Socket errors:\s*connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)\s*$",
    re.MULTILINE,
)
_QUANTILE = re.compile(r"^wrk-quantile ([0-9.]+) ([0-9.]+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class WrkResult:
    """One wrk run, or several run at once and merged. Times are in seconds."""

    requests: int
    requests_per_sec: float
    p50: float
    p99: float
    non_2xx: int = 0  # wrk counts every status >= 400 here despite the label
    socket_errors: int = 0  # connect + read + write + timeout
    # Latency at 0.1 %, 0.2 %, ..., 100 % (from the script's done()); empty if wrk printed none.
    quantiles: tuple[float, ...] = ()

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors


def parse_time(text: str) -> float:
    """wrk's latency notation (``635.91us``, ``1.20ms``, ``2.00s``, ``1.50m``) in seconds."""
    match = _TIME.match(text)
    if match is None:
        raise ValueError(f"not a wrk latency: {text!r}")
    return float(match[1]) * _TIME_UNITS[match[2]]


def parse_wrk_output(text: str) -> WrkResult:
    """The figures of one ``wrk --latency`` run; ValueError naming what is missing."""
    rate = _RATE.search(text)
    requests = _REQUESTS.search(text)
    percentiles = {match[1]: parse_time(match[2]) for match in _PERCENTILE.finditer(text)}
    missing = [
        name
        for name, found in (
            ("Requests/sec", rate),
            ("'N requests in'", requests),
            ("50% latency", "50" in percentiles),
            ("99% latency", "99" in percentiles),
        )
        if not found
    ]
    if missing or rate is None or requests is None:
        raise ValueError(f"wrk output lacks {', '.join(missing)} (was --latency given?)")
    non_2xx = _NON_2XX.search(text)
    socket_errors = _SOCKET_ERRORS.search(text)
    quantiles = tuple(float(match[2]) * 1e-6 for match in _QUANTILE.finditer(text))  # printed in us
    return WrkResult(
        requests=int(requests[1]),
        requests_per_sec=float(rate[1]),
        p50=percentiles["50"],
        p99=percentiles["99"],
        non_2xx=int(non_2xx[1]) if non_2xx else 0,
        socket_errors=sum(int(count) for count in socket_errors.groups()) if socket_errors else 0,
        quantiles=quantiles if len(quantiles) == QUANTILE_STEPS else (),
    )


def merge_results(results: Sequence[WrkResult]) -> WrkResult:
    """wrk processes that ran at the same time, as one client: rates and errors add up; p50 and p99
    are those of the request-weighted mixture of their latency distributions (each process's 1000
    quantiles stand for equal shares of its requests). Without quantiles, the worst p50 and p99."""
    if not results:
        raise ValueError("nothing to merge")
    if len(results) == 1:
        return results[0]
    merged = WrkResult(
        requests=sum(result.requests for result in results),
        requests_per_sec=sum(result.requests_per_sec for result in results),
        p50=max(result.p50 for result in results),
        p99=max(result.p99 for result in results),
        non_2xx=sum(result.non_2xx for result in results),
        socket_errors=sum(result.socket_errors for result in results),
    )
    if any(not result.quantiles for result in results) or merged.requests == 0:
        return merged
    points = sorted(
        (latency, result.requests / len(result.quantiles))
        for result in results
        for latency in result.quantiles
    )
    return dataclasses.replace(
        merged, p50=_weighted_percentile(points, 50.0), p99=_weighted_percentile(points, 99.0)
    )


def _weighted_percentile(points: Sequence[tuple[float, float]], percent: float) -> float:
    """The smallest latency at or below which ``percent`` % of the weight lies; points sorted."""
    target = sum(weight for _, weight in points) * percent / 100
    seen = 0.0
    for latency, weight in points:
        seen += weight
        if seen >= target * (1 - 1e-12):  # tolerate float rounding of the running sum
            return latency
    return points[-1][0]


# --- wrk load -------------------------------------------------------------------------------------


def lua_script(method: str, path: str, keys: int, value_size: int, seed: int) -> str:
    """A wrk script: ``method`` on uniformly random keys of the filled space, with a ``value_size``-byte
    body for PUT; done() prints the latency quantiles that merge_results needs."""
    body = f'string.rep("v", {value_size})' if method == "PUT" else "nil"
    return f"""-- generated by loadtest.bench
local keys = {keys}
local prefix = "{path}?id="
local body = {body}
math.randomseed({seed})

request = function()
  local id = string.format("key-%08d", math.random(0, keys - 1))
  return wrk.format("{method}", prefix .. id, nil, body)
end

done = function(summary, latency, requests)
  for i = 1, {QUANTILE_STEPS} do
    local p = i * 100 / {QUANTILE_STEPS}
    -- wrk's percentile(100) answers 0, so the top point is the maximum
    local value = i == {QUANTILE_STEPS} and latency.max or latency:percentile(p)
    io.write(string.format("wrk-quantile %.1f %.0f\\n", p, value))
  end
end
"""


def split_connections(total: int, parts: int) -> list[int]:
    """``total`` connections over ``parts`` wrk processes, as evenly as possible (64 / 3 = 22, 21, 21)."""
    if parts < 1 or total < parts:
        raise ValueError(f"cannot split {total} connections over {parts} wrk processes")
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


# --- processes ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc (0 where /proc is not available)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _children_cpu_seconds() -> float:
    """CPU time of every child reaped so far: its growth across a run is what wrk used."""
    usage = os.times()
    return usage.children_user + usage.children_system


def ensure_wrk() -> str:
    """The path of wrk, installing the Debian package first if it is missing."""
    found = shutil.which("wrk")
    if found:
        return found
    command = ["apt-get", "install", "-y", "wrk"]
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise BenchError(
                "wrk is not installed and this user cannot install it: run `apt-get install wrk`"
            )
        command = ["sudo", "-n", *command]
    if shutil.which("apt-get") is None:
        raise BenchError("wrk is not installed and there is no apt-get here: install wrk and rerun")
    _progress(f"wrk is missing; running: {shlex.join(command)}")
    try:
        status = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, timeout=600).returncode
    except subprocess.TimeoutExpired:
        raise BenchError("installing wrk took over 10 minutes; install it by hand and rerun") from None
    found = shutil.which("wrk")
    if status != 0 or found is None:
        raise BenchError(f"`{shlex.join(command)}` failed (status {status}): install wrk by hand and rerun")
    return found


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port_run(count: int, attempts: int = 100) -> int:
    """The first of ``count`` consecutive loopback ports that are free right now."""
    for _ in range(attempts):
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            base: int = probe.getsockname()[1]
        if base + count - 1 <= 65535 and all(_port_is_free(port) for port in range(base, base + count)):
            return base
    raise BenchError(f"found no {count} consecutive free ports on {HOST}")


@contextlib.contextmanager
def hello_world() -> Iterator[tuple[list[str], list[subprocess.Popen[bytes]]]]:
    """The hello-world app on a free port: ([its URL], [its process]); stopped on exit."""
    port = free_port_run(1)
    url = f"http://{HOST}:{port}"
    command = [sys.executable, "-m", "loadtest.hello", "--host", HOST, "--port", str(port)]
    process = subprocess.Popen(command, preexec_fn=die_with_parent)
    try:
        if not wait_until_serving(url, process, time.monotonic() + _READY_TIMEOUT):
            raise BenchError(f"the hello-world app did not start on {url}")
        yield [url], [process]
    finally:
        stop_processes([process])


@contextlib.contextmanager
def kvnode_cluster(mode: str, data_dir: Path) -> Iterator[tuple[list[str], list[subprocess.Popen[bytes]]]]:
    """A fresh cluster of NODES with ``mode`` fan-out: (node URLs, node processes); stopped on exit."""
    fanout: FanoutMode = "sync" if mode == "sync" else "async"
    for attempt in range(1, _CLUSTER_ATTEMPTS + 1):
        node = NodeConfig(host=HOST, port=free_port_run(NODES), data_dir=data_dir / f"try-{attempt}",
                          fanout=fanout)  # fmt: skip
        nodes = NodeProcesses(ClusterConfig(nodes=NODES, node=node).node_configs())
        try:
            nodes.start()
            not_ready = nodes.wait_ready(_READY_TIMEOUT)
            if not not_ready:
                yield [config.url for config in nodes.configs], nodes.processes
                return
            _progress(f"nodes did not start ({', '.join(not_ready)}), attempt {attempt}/{_CLUSTER_ATTEMPTS}")
        finally:
            nodes.stop()  # by PID: SIGTERM, SIGKILL after its own deadline
    raise BenchError(f"a {mode} cluster of {NODES} did not start in {_CLUSTER_ATTEMPTS} attempts")


async def _put_each(
    session: aiohttp.ClientSession,
    urls: Sequence[str],
    indexes: Sequence[int],
    value: bytes,
    concurrency: int,
) -> dict[int, str]:
    """PUT each key once, round-robin over the nodes; the keys that did not get a 201, with why."""
    pending = iter(indexes)
    failed: dict[int, str] = {}

    async def worker() -> None:
        for index in pending:  # shared: each index is taken by exactly one worker
            url = f"{urls[index % len(urls)]}/v0/entity"
            try:
                async with session.put(url, params={"id": key_name(index)}, data=value) as response:
                    await response.read()
                    if response.status != 201:
                        failed[index] = f"status {response.status}"
            except aiohttp.ClientError as error:
                failed[index] = repr(error)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


async def _fill(urls: Sequence[str], keys: int, value_size: int, concurrency: int) -> int:
    """PUT every key, retrying the ones that failed (a 504 under load; PUTs are idempotent upserts);
    how many retries it took. BenchError if keys still fail after _FILL_ROUNDS rounds."""
    value = b"v" * value_size
    todo: Sequence[int] = range(keys)
    retries = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session, asyncio.timeout(_FILL_TIMEOUT):
        for round_ in range(1, _FILL_ROUNDS + 1):
            failed = await _put_each(session, urls, todo, value, concurrency)
            if not failed:
                return retries
            reason = next(iter(failed.values()))
            if len(failed) == keys:
                raise BenchError(f"fill: the cluster accepted none of {keys} PUTs ({reason})")
            _progress(f"  fill round {round_}: {len(failed)} PUTs failed (e.g. {reason}); retrying them")
            todo = sorted(failed)
            retries += len(failed)
            await asyncio.sleep(1.0)  # let a dropped replica channel reconnect
    raise BenchError(f"fill: {len(todo)} of {keys} keys still failed after {_FILL_ROUNDS} rounds ({reason})")


def fill(urls: Sequence[str], keys: int, value_size: int, concurrency: int) -> None:
    started = time.monotonic()
    try:
        retries = interruptible.run(_fill(urls, keys, value_size, concurrency))
    except TimeoutError:
        raise BenchError(f"fill took over {_FILL_TIMEOUT:.0f}s") from None
    elapsed = time.monotonic() - started
    _progress(
        f"  filled {keys} keys of {value_size} bytes in {elapsed:.1f}s ({keys / elapsed:,.0f} PUT/s"
        f"{f', {retries} retried' if retries else ''})"
    )


@dataclass(frozen=True, slots=True)
class Measured:
    result: WrkResult
    server_cpu: list[float]  # CPU seconds each server process used during the run
    wrk_cpu: float
    elapsed: float


def run_wrk(
    wrk: str,
    urls: Sequence[str],
    servers: Sequence[subprocess.Popen[bytes]],
    scripts: Sequence[Path],
    connections: int,
    duration: int,
) -> Measured:
    """One wrk process per URL (-t1, connections split evenly), all at once; merged, with the CPU the
    servers and wrk used meanwhile."""
    shares = split_connections(connections, len(urls))
    outputs = [script.with_suffix(".out") for script in scripts]
    processes: list[subprocess.Popen[bytes]] = []
    cpu_before = [cpu_seconds(server.pid) for server in servers]
    wrk_before = _children_cpu_seconds()
    started = time.monotonic()
    try:
        for url, share, script, output in zip(urls, shares, scripts, outputs, strict=True):
            command = [wrk, "-t1", f"-c{share}", f"-d{duration}s", "--latency", "-s", str(script), url]
            with output.open("wb") as sink:  # a file, not a pipe: several outputs, no reader deadlock
                processes.append(
                    subprocess.Popen(
                        command, stdout=sink, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
                    )
                )
        deadline = started + duration + _WRK_GRACE
        for process in processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BenchError(f"wrk ran {_WRK_GRACE:.0f}s past its {duration}s and was stopped") from None
    finally:
        stop_processes(processes)  # a no-op unless something above went wrong
    elapsed = time.monotonic() - started
    cpu_after = [cpu_seconds(server.pid) for server in servers]
    results = []
    for process, output in zip(processes, outputs, strict=True):
        text = output.read_text(errors="replace")
        if process.returncode != 0:
            raise BenchError(f"wrk exited with status {process.returncode}: {text.strip()[-300:]}")
        try:
            results.append(parse_wrk_output(text))
        except ValueError as error:
            raise BenchError(f"{error}; output in {output}") from None
    return Measured(
        result=merge_results(results),
        server_cpu=[after - before for before, after in zip(cpu_before, cpu_after, strict=True)],
        wrk_cpu=_children_cpu_seconds() - wrk_before,
        elapsed=elapsed,
    )


# --- the report -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    target: str
    mode: str
    op: str
    measured: Measured

    @property
    def server_cpu_per_request(self) -> float | None:
        requests = self.measured.result.requests
        return sum(self.measured.server_cpu) / requests if requests else None


def format_latency(seconds: float) -> str:
    milliseconds = seconds * 1000
    if milliseconds < 10:
        return f"{milliseconds:.2f} ms"
    if milliseconds < 100:
        return f"{milliseconds:.1f} ms"
    return f"{milliseconds:,.0f} ms"


def _format_errors(result: WrkResult) -> str:
    if not result.errors:
        return "0"
    return f"{result.errors:,} (status {result.non_2xx:,}, socket {result.socket_errors:,})"


def render_table(rows: Sequence[Row]) -> str:
    hello = {row.op: row.measured.result.requests_per_sec for row in rows if row.target == "hello-world"}
    lines = [
        "| target | mode | op | req/s | p50 | p99 | errors | vs hello-world | server CPU/req |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        result = row.measured.result
        reference = hello.get(row.op)
        ratio = f"{result.requests_per_sec / reference:.2f}x" if reference else "n/a"
        cpu = row.server_cpu_per_request
        lines.append(
            f"| {row.target} | {row.mode} | {row.op.upper()} | {result.requests_per_sec:,.0f} "
            f"| {format_latency(result.p50)} | {format_latency(result.p99)} | {_format_errors(result)} "
            f"| {ratio} | {'n/a' if cpu is None else f'{cpu * 1e6:,.0f} us'} |"
        )
    return "\n".join(lines)


def _load_line(args: argparse.Namespace) -> str:
    if args.spread:
        shares = "+".join(str(share) for share in split_connections(args.connections, NODES))
        return (
            f"Load (--spread): {NODES} wrk processes at once, -t1 and {shares} connections, one per node, "
            f"so every node coordinates; the hello-world app gets the same {NODES} processes on its one port."
        )
    return (
        f"Load (--no-spread): one wrk process, -t1 -c{args.connections}, all of it sent to the first node "
        "(the only coordinator); the hello-world app gets the same wrk process."
    )


def _caveat(args: argparse.Namespace) -> str:
    """What the ratio column can and cannot say under this load shape."""
    if args.spread:
        return (
            f"With --spread the {NODES} nodes can use every core while the hello-world app, one process, "
            "uses at most one: the ratio flatters kvnode's throughput where the machine has cores to spare; "
            "server CPU/req does not depend on that."
        )
    return (
        "With --no-spread the first node's one event loop (at most one core) bounds kvnode, as one "
        "process bounds the hello-world app; the other nodes only answer replica calls."
    )


def reproduce_command(args: argparse.Namespace) -> str:
    argv = [
        "python", "-m", "loadtest.bench",
        "--duration", str(args.duration), "--connections", str(args.connections),
        "--modes", ",".join(args.modes), "--ops", ",".join(args.ops),
        "--keys", str(args.keys), "--value-size", str(args.value_size),
        "--spread" if args.spread else "--no-spread",
    ]  # fmt: skip
    return shlex.join(argv)


def report(rows: Sequence[Row], args: argparse.Namespace) -> str:
    cores = os.cpu_count()
    return "\n".join(
        [
            f"## kvnode ({NODES} nodes) vs aiohttp hello-world under wrk, {args.duration}s per row",
            "",
            _load_line(args),
            f"PUT: {args.value_size}-byte values, default quorum (ack=2, from=3); GET: default quorum; "
            f"keys uniformly random among the {args.keys:,} filled ones.",
            "",
            render_table(rows),
            "",
            f"Reproduce: `{reproduce_command(args)}`",
            "",
            f"The cluster, the hello-world app, wrk and everything else share this machine's {cores} cores "
            f"(os.cpu_count() = {cores}): the figures compare targets; they do not measure a dedicated "
            "server. server CPU/req is the CPU time all server processes (every node) used during the "
            "row, per request answered.",
            _caveat(args),
        ]
    )


# --- the run --------------------------------------------------------------------------------------


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _measure_target(
    wrk: str,
    target: str,
    mode: str,
    urls: Sequence[str],
    servers: Sequence[subprocess.Popen[bytes]],
    path: str,
    args: argparse.Namespace,
    scratch: Path,
) -> list[Row]:
    rows = []
    if not args.spread:
        load_urls = [urls[0]]
    elif len(urls) == 1:
        load_urls = [urls[0]] * NODES  # hello-world: the same client shape as against the cluster
    else:
        load_urls = list(urls)
    for op in args.ops:
        method = op.upper()
        scripts = []
        for index in range(len(load_urls)):
            script = scratch / f"{target}-{mode}-{op}-{index}.lua"
            script.write_text(lua_script(method, path, args.keys, args.value_size, seed=index + 1))
            scripts.append(script)
        _progress(f"running {target} {mode} {method} for {args.duration}s")
        measured = run_wrk(wrk, load_urls, servers, scripts, args.connections, args.duration)
        result = measured.result
        busy = (sum(measured.server_cpu) + measured.wrk_cpu) / measured.elapsed
        _progress(
            f"  {result.requests_per_sec:,.0f} req/s, p50 {format_latency(result.p50)}, "
            f"p99 {format_latency(result.p99)}, errors {result.errors}; server CPU "
            f"{'/'.join(f'{cpu:.1f}' for cpu in measured.server_cpu)}s, wrk CPU {measured.wrk_cpu:.1f}s, "
            f"{busy:.2f} of {os.cpu_count()} cores busy with these"
        )
        rows.append(Row(target, mode, op, measured))
    return rows


def run(args: argparse.Namespace) -> str:
    wrk = ensure_wrk()
    _progress(_load_line(args))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kvnode-bench-") as temp:
        scratch = Path(temp)
        _progress("starting the hello-world app")
        with hello_world() as (urls, servers):
            rows += _measure_target(wrk, "hello-world", "-", urls, servers, "/", args, scratch)
        for mode in args.modes:
            _progress(f"starting a {NODES}-node cluster, {mode} fan-out")
            data_dir = scratch / f"data-{mode}"
            with kvnode_cluster(mode, data_dir) as (urls, servers):
                fill(urls, args.keys, args.value_size, args.connections)
                rows += _measure_target(wrk, "kvnode", mode, urls, servers, "/v0/entity", args, scratch)
            shutil.rmtree(data_dir, ignore_errors=True)  # free the disk before the next cluster
    return report(rows, args)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench",
        description="A fresh 3-node kvnode cluster per fan-out mode under wrk, next to an aiohttp "
        "hello-world driven the same way, reported as one Markdown table.",
    )
    parser.add_argument(
        "--duration", type=positive_int, default=10, help="seconds of wrk per row (default: 10)"
    )
    parser.add_argument(
        "--connections", type=positive_int, default=64, help="wrk connections in all (default: 64)"
    )
    parser.add_argument(
        "--modes", type=choices(MODES), default=list(MODES), help="fan-out modes (default: async,sync)"
    )
    parser.add_argument("--ops", type=choices(OPS), default=list(OPS), help="operations (default: get,put)")
    parser.add_argument(
        "--keys", type=positive_int, default=10_000, help="keys filled and drawn from (default: 10000)"
    )
    parser.add_argument(
        "--value-size", type=non_negative_int, default=100, help="bytes per value (default: 100)"
    )
    parser.add_argument(
        "--spread",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one wrk process per node, so every node coordinates, as clients of a Dynamo-style store "
        "would; --no-spread sends all load to the first node (default: --spread)",
    )
    parser.add_argument("--out", type=Path, help="also write the report to this Markdown file")
    args = parser.parse_args(argv)
    if args.spread and args.connections < NODES:
        parser.error(f"--spread needs at least {NODES} connections (one wrk process per node)")
    if args.keys > 10**8:
        parser.error("--keys is at most 100000000 (keys are named key-00000000 ...)")
    return args


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through every finally: each process started is stopped by PID


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a background start inherits it ignored
        signal.signal(signum, _interrupted)
    try:
        text = run(args)
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    print(text, flush=True)
    if args.out is not None:
        args.out.write_text(text + "\n")
        _progress(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
