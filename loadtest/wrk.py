"""Running wrk: installing it if missing, the Lua scripts it runs (a method on random keys; a chain of
conditional writes, each over the version the last answer named), its output parsed, and several wrk
processes run at once and merged into one result (``python -m loadtest.bench`` uses it).

Every wrk process is started with die_with_parent, bounded in time, and stopped by PID.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvnode.ops.processes import cpu_seconds, die_with_parent, stop_processes

__all__ = [
    "QUANTILE_STEPS",
    "Measured",
    "WrkError",
    "WrkResult",
    "conditional_lua_script",
    "ensure_wrk",
    "format_latency",
    "lua_script",
    "merge_results",
    "parse_time",
    "parse_wrk_output",
    "run_wrk",
    "split_connections",
]

QUANTILE_STEPS = 1000  # the wrk script prints latency at every 0.1 %, so runs at once can be merged
_WRK_GRACE = 30.0  # seconds a wrk process may run past its duration before it is killed


class WrkError(Exception):
    """wrk is missing and cannot be installed, failed, or printed what cannot be parsed."""


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
_OUTCOMES = re.compile(r"^wrk-outcomes (.*)$", re.MULTILINE)  # a conditional script's: name count ...


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
    # A conditional script's answers by outcome (applied, not_applied, unknown, other); empty for others.
    outcomes: Mapping[str, int] = dataclasses.field(default_factory=dict)

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
    outcomes = _OUTCOMES.search(text)
    counted = outcomes[1].split() if outcomes else []
    return WrkResult(
        requests=int(requests[1]),
        requests_per_sec=float(rate[1]),
        p50=percentiles["50"],
        p99=percentiles["99"],
        non_2xx=int(non_2xx[1]) if non_2xx else 0,
        socket_errors=sum(int(count) for count in socket_errors.groups()) if socket_errors else 0,
        quantiles=quantiles if len(quantiles) == QUANTILE_STEPS else (),
        outcomes={name: int(count) for name, count in zip(counted[::2], counted[1::2], strict=True)},
    )


def format_latency(seconds: float) -> str:
    """A latency as the bench's tables show it: three significant digits or so, in milliseconds."""
    milliseconds = seconds * 1000
    if milliseconds < 10:
        return f"{milliseconds:.2f} ms"
    if milliseconds < 100:
        return f"{milliseconds:.1f} ms"
    return f"{milliseconds:,.0f} ms"


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
        outcomes=_added([result.outcomes for result in results]),
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


def _added(counts: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """Counts by name added up, a name counted 0 kept."""
    total: dict[str, int] = {}
    for each in counts:
        for name, count in each.items():
            total[name] = total.get(name, 0) + count
    return total


def _weighted_percentile(points: Sequence[tuple[float, float]], percent: float) -> float:
    """The smallest latency at or below which ``percent`` % of the weight lies; points sorted."""
    target = sum(weight for _, weight in points) * percent / 100
    seen = 0.0
    for latency, weight in points:
        seen += weight
        if seen >= target * (1 - 1e-12):  # tolerate float rounding of the running sum
            return latency
    return points[-1][0]


# The body of a done() that prints the latency quantiles merge_results needs.
_PRINT_QUANTILES = f"""  for i = 1, {QUANTILE_STEPS} do
    local p = i * 100 / {QUANTILE_STEPS}
    -- wrk's percentile(100) answers 0, so the top point is the maximum
    local value = i == {QUANTILE_STEPS} and latency.max or latency:percentile(p)
    io.write(string.format("wrk-quantile %.1f %.0f\\n", p, value))
  end
"""


def lua_script(method: str, path: str, keys: int, value_size: int, seed: int, token: str = "") -> str:
    """A wrk script: ``method`` on uniformly random keys of the filled space, with a ``value_size``-byte
    body for PUT (and ``token`` as a bearer token, when given); done() prints the latency quantiles that
    merge_results needs."""
    body = f'string.rep("v", {value_size})' if method == "PUT" else "nil"
    headers = f'{{["Authorization"] = "Bearer {token}"}}' if token else "nil"
    return f"""-- generated by loadtest.wrk
local keys = {keys}
local prefix = "{path}?id="
local body = {body}
local headers = {headers}
math.randomseed({seed})

request = function()
  local id = string.format("key-%08d", math.random(0, keys - 1))
  return wrk.format("{method}", prefix .. id, headers, body)
end

done = function(summary, latency, requests)
{_PRINT_QUANTILES}end
"""


def conditional_lua_script(path: str, key: str, value_size: int, token: str = "") -> str:
    """A wrk script for one connection (``-t1 -c1``: wrk's Lua state is its thread's): conditional PUTs of
    ``key``, each over the version the last answer named (its write's ETag, or a 412's current one), or,
    where none did (at first, after a 504), only if the key has no live value; done() prints the latency
    quantiles and the answers by outcome."""
    auth = f'"Bearer {token}"' if token else "nil"
    return f"""-- generated by loadtest.wrk
local target = "{path}?id={key}"
local body = string.rep("v", {value_size})
local auth = {auth}
local threads = {{}}
etag = nil  -- the version the next write must replace (nil: none known)
-- globals, so that done() can read them through each thread
applied, not_applied, unknown, other = 0, 0, 0, 0

setup = function(thread)
  table.insert(threads, thread)
end

request = function()
  local headers = {{["Authorization"] = auth}}
  if etag then headers["If-Match"] = etag else headers["If-None-Match"] = "*" end
  return wrk.format("PUT", target, headers, body)
end

response = function(status, headers, body)
  if status == 201 then applied = applied + 1
  elseif status == 412 then not_applied = not_applied + 1
  elseif status == 504 then unknown = unknown + 1
  else other = other + 1 end
  etag = headers["ETag"] or headers["Etag"] or headers["etag"]
end

done = function(summary, latency, requests)
{_PRINT_QUANTILES}  local line = "wrk-outcomes"
  for _, name in ipairs({{"applied", "not_applied", "unknown", "other"}}) do
    local count = 0
    for _, thread in ipairs(threads) do count = count + thread:get(name) end
    line = line .. " " .. name .. " " .. count
  end
  io.write(line .. "\\n")
end
"""


def split_connections(total: int, parts: int) -> list[int]:
    """``total`` connections over ``parts`` wrk processes, as evenly as possible (64 / 3 = 22, 21, 21)."""
    if parts < 1 or total < parts:
        raise ValueError(f"cannot split {total} connections over {parts} wrk processes")
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


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
            raise WrkError("wrk is not installed and this user cannot install it: run `apt-get install wrk`")
        command = ["sudo", "-n", *command]
    if shutil.which("apt-get") is None:
        raise WrkError("wrk is not installed and there is no apt-get here: install wrk and rerun")
    print(f"wrk is missing; running: {shlex.join(command)}", file=sys.stderr, flush=True)
    try:
        status = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr, timeout=600).returncode
    except subprocess.TimeoutExpired:
        raise WrkError("installing wrk took over 10 minutes; install it by hand and rerun") from None
    found = shutil.which("wrk")
    if status != 0 or found is None:
        raise WrkError(f"`{shlex.join(command)}` failed (status {status}): install wrk by hand and rerun")
    return found


@dataclass(frozen=True, slots=True)
class Measured:
    result: WrkResult
    server_cpu: list[float]  # CPU seconds each server process used during the run
    wrk_cpu: float
    elapsed: float


def run_wrk(
    wrk: str,
    urls: Sequence[str],
    server_pids: Sequence[int],
    scripts: Sequence[Path],
    connections: int,
    duration: int,
) -> Measured:
    """One wrk process per URL (-t1, connections split evenly), all at once; merged, with the CPU the
    servers and wrk used meanwhile."""
    shares = split_connections(connections, len(urls))
    outputs = [script.with_suffix(".out") for script in scripts]
    processes: list[subprocess.Popen[bytes]] = []
    cpu_before = [cpu_seconds(pid) for pid in server_pids]
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
                raise WrkError(f"wrk ran {_WRK_GRACE:.0f}s past its {duration}s and was stopped") from None
    finally:
        stop_processes(processes)  # a no-op unless something above went wrong
    elapsed = time.monotonic() - started
    cpu_after = [cpu_seconds(pid) for pid in server_pids]
    results = []
    for process, output in zip(processes, outputs, strict=True):
        text = output.read_text(errors="replace")
        if process.returncode != 0:
            raise WrkError(f"wrk exited with status {process.returncode}: {text.strip()[-300:]}")
        try:
            results.append(parse_wrk_output(text))
        except ValueError as error:
            raise WrkError(f"{error}; output in {output}") from None
    return Measured(
        result=merge_results(results),
        server_cpu=[after - before for before, after in zip(cpu_before, cpu_after, strict=True)],
        wrk_cpu=_children_cpu_seconds() - wrk_before,
        elapsed=elapsed,
    )
