"""The load: constant-rate, from the load-testing pipeline's CLI (``python -m loadtest``) run as a bounded
subprocess; and a closed loop at saturation, from wrk as ``make bench`` drives it (loadtest.wrk)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loadtest.workload import Workload
from loadtest.wrk import WrkError, lua_script, run_wrk
from profiling.children import Children

__all__ = ["LoadError", "LoadSpec", "fill", "saturate", "start_rate", "wait_rate"]

# cas: a read, then a conditional write on the version it found (loadtest.workload); its figures are per op
Op = Literal["put", "get", "cas"]

_GRACE = 60.0  # seconds a load may run past its duration (start-up, draining) before it is killed


class LoadError(RuntimeError):
    """The load generator failed or wrote no result."""


@dataclass(frozen=True)
class LoadSpec:
    op: Op
    rate: int
    duration: float
    keys: int
    value_size: int


def fill(url: str, spec: LoadSpec, children: Children, log: Path) -> None:
    """Write every key the GET load will read."""
    argv = [
        sys.executable, "-m", "loadtest", "fill", "--url", url,
        "--keys", str(spec.keys), "--value-size", str(spec.value_size),
    ]  # fmt: skip
    process = children.start(argv, log=log)
    _wait(process, children, timeout=_GRACE + spec.keys / 50, what="fill", log=log)


def start_rate(
    url: str, spec: LoadSpec, result_path: Path, children: Children, log: Path
) -> subprocess.Popen[bytes]:
    # Round-robin over one URL: every request to the coordinator profiled, where token-aware routing,
    # the default, would send two in three to the other nodes.
    argv = [
        sys.executable, "-m", "loadtest", "rate", "--url", url, "--routing", "round-robin", "--op", spec.op,
        "--rate", str(spec.rate), "--duration", f"{spec.duration:g}",
        "--keys", str(spec.keys), "--value-size", str(spec.value_size), "--json", str(result_path),
    ]  # fmt: skip
    result_path.unlink(missing_ok=True)
    return children.start(argv, log=log)


def wait_rate(
    process: subprocess.Popen[bytes], spec: LoadSpec, result_path: Path, children: Children, log: Path
) -> dict[str, Any]:
    """Wait for a rate run (killed if it overruns) and return its JSON result."""
    _wait(process, children, timeout=spec.duration + _GRACE, what="rate", log=log)
    try:
        result: dict[str, Any] = json.loads(result_path.read_text())
    except (OSError, ValueError) as error:
        raise LoadError(f"loadtest rate wrote no readable {result_path}: {error}") from None
    return result


def saturate(
    wrk: str, url: str, workload: Workload, connections: int, duration: int, scratch: Path
) -> dict[str, Any]:
    """A closed loop on ``url`` for ``duration`` s: one wrk process (``-t1``, as ``make bench --no-spread``
    loads its coordinator), ``connections`` connections each sending its next request of ``workload`` as
    its answer arrives; its script and output in ``scratch``. The figures in the shape of a rate run's
    result (achieved_rate, latency_ms, errors, valid), so the report's load table reads both."""
    script = scratch / f"saturation-{workload.op}.lua"
    scratch.mkdir(parents=True, exist_ok=True)
    script.write_text(
        lua_script(workload.op.upper(), workload.path, workload.keys, workload.value_size, workload.seed)
    )
    try:
        result = run_wrk(wrk, [url], [], [script], connections, duration).result
    except WrkError as error:
        raise LoadError(f"wrk: {error}") from None
    errors = {
        name: count
        for name, count in (("non-2xx", result.non_2xx), ("socket", result.socket_errors))
        if count
    }
    latency = {"p50": result.p50 * 1e3, "p99": result.p99 * 1e3}
    if result.quantiles:  # the script's last quantile is the maximum
        latency["max"] = result.quantiles[-1] * 1e3
    return {
        "loop": "closed",
        "connections": connections,
        "duration_s": duration,
        "urls": [url],
        "requests": result.requests,
        "achieved_rate": result.requests_per_sec,
        "latency_ms": latency,
        "errors": errors,
        "valid": not errors,
        "invalid_reasons": [f"{count} {name} errors" for name, count in errors.items()],
    }


def _wait(process: subprocess.Popen[bytes], children: Children, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    overran = process.poll() is None
    status = children.stop(process)  # a no-op wait when it has exited; the bound when it has not
    if overran:
        raise LoadError(f"loadtest {what} ran past its bound of {timeout:.0f} s and was stopped (log {log})")
    if status != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:]) if log.exists() else ""
        raise LoadError(f"loadtest {what} exited with status {status} (log {log}):\n{tail}")
