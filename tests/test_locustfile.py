"""loadtest/locustfile.py runs headless against a real cluster with zero failures."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ClusterFactory

LOCUSTFILE = Path(__file__).parent.parent / "loadtest" / "locustfile.py"
KEYS = 200


@pytest.mark.parametrize(
    ("users", "names"),
    [
        (["PutUser", "GetUser"], {"PUT /v0/entity", "GET /v0/entity"}),
        # Apart from GetUser: deleted keys answer 404, a failure for GetUser but not for MixedUser.
        (["MixedUser", "DeleteUser"], {"PUT /v0/entity", "GET /v0/entity", "DELETE /v0/entity"}),
    ],
)
def test_locust_headless_has_no_failures(
    start_cluster: ClusterFactory, tmp_path: Path, users: list[str], names: set[str]
) -> None:
    cluster = start_cluster(3)
    url = cluster[0].url
    filled = subprocess.run(
        [sys.executable, "-m", "loadtest", "fill", "--url", ",".join(cluster.urls), "--keys", str(KEYS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert filled.returncode == 0, filled.stderr
    prefix = tmp_path / "locust"
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "5", "-r", "5"]
    locust += ["-t", "5s", "--host", url, "--csv", str(prefix), "--kv-keys", str(KEYS), *users]
    finished = subprocess.run(locust, capture_output=True, text=True, timeout=90)
    assert finished.returncode == 0, finished.stderr[-3000:]

    with open(f"{prefix}_stats.csv", newline="") as stats:
        rows = {row["Name"]: row for row in csv.DictReader(stats)}
    assert names <= set(rows)
    total = rows["Aggregated"]
    assert int(total["Request Count"]) > 0
    assert int(total["Failure Count"]) == 0
