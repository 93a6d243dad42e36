"""``python -m loadtest ui``: a fresh local 3-node cluster, filled, and Locust's web UI pointed at it.

The UI listens on 127.0.0.1 only, with the host field filled in and a picker for the user classes of
:mod:`loadtest.locustfile`. Ctrl-C stops Locust and every node, by PID, and exits 0.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from kvnode.config import FanoutMode
from kvnode.local_cluster import stop_processes
from loadtest import interruptible
from loadtest.fill import fill
from loadtest.scenarios import start_scenario
from loadtest.workload import Workload

__all__ = ["run_ui"]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def run_ui(web_port: int, keys: int, mode: FanoutMode) -> int:
    """Run until Ctrl-C or SIGTERM, the normal way to stop it (exit status 0), or until Locust exits."""
    try:
        with tempfile.TemporaryDirectory(prefix="kvnode-ui-") as data:
            return _serve(web_port, keys, mode, Path(data))
    except KeyboardInterrupt:
        return 0


def _serve(web_port: int, keys: int, mode: FanoutMode, data: Path) -> int:
    cluster = start_scenario("healthy", mode, data)
    locust: subprocess.Popen[bytes] | None = None
    try:
        _, failures = interruptible.run(fill(cluster.load_urls, Workload("put", keys)))
        if failures:
            print(f"loadtest ui: the fill failed: {dict(failures)}", file=sys.stderr)
            return 1
        host = cluster.load_urls[0]
        argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", host, "--class-picker"]
        argv += ["--web-host", "127.0.0.1", "--web-port", str(web_port), "--kv-keys", str(keys)]
        locust = subprocess.Popen(argv)
        print(f"cluster ({mode} fan-out): {', '.join(cluster.load_urls)}, {keys} keys filled", flush=True)
        print(f"Locust UI: http://127.0.0.1:{web_port} (Ctrl-C stops Locust and the cluster)", flush=True)
        return locust.wait()
    finally:
        if locust is not None:
            stop_processes([locust])
        cluster.stop()
