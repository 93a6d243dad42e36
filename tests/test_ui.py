"""``python -m loadtest ui``: Ctrl-C is how it is meant to be stopped, so it exits 0 and leaves nothing
running. Real processes: the UI's own cluster and Locust."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvnode.local_cluster import free_ports
from tests.harness import request

DEADLINE = 90.0


def serves(url: str) -> bool:
    try:
        return request(url, "GET", "/", timeout=2).status < 500
    except OSError:
        return False


def test_ctrl_c_stops_locust_and_the_cluster_with_exit_status_0(tmp_path: Path) -> None:
    web_port = free_ports(1)[0]
    log = tmp_path / "ui.err"
    with open(log, "wb") as err:
        ui = subprocess.Popen(
            [sys.executable, "-m", "loadtest", "ui", "--web-port", str(web_port), "--keys", "20"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert ui.stdout is not None
    try:
        cluster_line = ui.stdout.readline()  # printed once the cluster is filled and Locust started
        assert cluster_line.startswith("cluster ("), (cluster_line, log.read_text()[-3000:])
        node_urls = re.findall(r"http://[\d.]+:\d+", cluster_line)
        locust_url = f"http://127.0.0.1:{web_port}"
        deadline = time.monotonic() + DEADLINE
        while not serves(locust_url):
            assert ui.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "Locust's UI never answered"
            time.sleep(0.1)
        ui.send_signal(signal.SIGINT)
        assert ui.wait(DEADLINE) == 0, log.read_text()[-3000:]
        assert node_urls and not any(serves(url + "/v0/status") for url in node_urls)
        assert not serves(locust_url)
    finally:
        if ui.poll() is None:
            ui.kill()
            ui.wait()
