"""loadtest.wrk: wrk output parsing, merging concurrent wrk runs, the generated script, and wrk run end
to end against the hello-world app."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loadtest.targets import hello_world
from loadtest.wrk import (
    lua_script,
    run_wrk,
)


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk not installed")
def test_wrk_against_hello_world(tmp_path: Path) -> None:
    """End to end for one second: the generated script runs in wrk and its output parses."""
    wrk = shutil.which("wrk")
    assert wrk is not None
    with hello_world() as app:
        scripts = []
        for index in range(2):
            scripts.append(tmp_path / f"put-{index}.lua")
            scripts[-1].write_text(lua_script("PUT", "/", keys=10, value_size=100, seed=index + 1))
        measured = run_wrk(wrk, app.urls * 2, app.pids, scripts, connections=4, duration=1)
    result = measured.result
    assert result.requests > 0 and result.errors == 0
    assert 0 < result.p50 <= result.p99
