"""tests/unit runs in this process only: a test here that starts a process (a node, the command line, a
load run) fails at once, naming it. Tests that need real processes live in tests/process (a node or a
command of the project, mirroring the modules as tests/unit does) and tests/cluster (scenarios)."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a unit test starts no process ({args[1:2] or args[:1]}): move it to tests/process")


@pytest.fixture(autouse=True)
def no_process_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refused)
    monkeypatch.setattr(asyncio, "create_subprocess_exec", _refused)
    monkeypatch.setattr(asyncio, "create_subprocess_shell", _refused)
