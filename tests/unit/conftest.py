"""tests/unit runs in this process only: a test here whose setup (fixtures of every scope included) or
body starts a process (a node, the command line, a load run) fails at once, naming it. The tests that
need a process of the project live in tests/process (mirroring the modules as tests/unit does), the
scenarios in tests/cluster. One tool is allowed: openssl, which makes the TLS tests' certificates once a
session (kvnode.ops.certs)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Generator, Iterator
from typing import Any

import pytest

_POPEN = subprocess.Popen.__init__


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a unit test starts no process ({args[1:2] or args[:1]}): move it to tests/process")


def _openssl_only(self: subprocess.Popen[Any], argv: Any, *args: Any, **kwargs: Any) -> None:
    if not (isinstance(argv, list | tuple) and argv and str(argv[0]).endswith("openssl")):
        _refused(self, argv)
    _POPEN(self, argv, *args, **kwargs)


@contextlib.contextmanager
def _no_process() -> Iterator[None]:
    patch = pytest.MonkeyPatch()
    patch.setattr(subprocess.Popen, "__init__", _openssl_only)
    patch.setattr(asyncio, "create_subprocess_exec", _refused)
    patch.setattr(asyncio, "create_subprocess_shell", _refused)
    try:
        yield
    finally:
        patch.undo()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _no_process():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _no_process():
        yield
