"""kvnode.ops.compile, its driver of mypyc stubbed (a real build takes a minute: docs/benchmarks.md has its
figures and the suites run against one): a build is a copy of the package with the modules compiled in
it, in place only once finished, made once per sources, the only one kept; a failed one leaves nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvnode import hot_path
from kvnode.ops import compile as compiling


def _package(root: Path) -> Path:
    package = root / "src" / "kvnode"
    (package / "node").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "node" / "__init__.py").write_text("")
    (package / "node" / "hot.py").write_text("def f() -> int:\n    return 1\n")
    return package


class FakeMypyc:
    """Writes an extension module beside each source and C files in build/, as mypyc does."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.runs: list[list[str]] = []

    def __call__(self, work: Path, paths: Sequence[str]) -> None:
        self.runs.append(list(paths))
        assert (work / "mypy.ini").is_file()
        (work / "build").mkdir()
        (work / "build" / "__native.c").write_text("/* C */")
        if self.fails:
            raise compiling.CompileFailed("error: gcc not found")
        for path in paths:
            assert (work / path).is_file(), path  # compiled in the copy, from the copy's sources
            (work / path).with_suffix(".cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")


@pytest.fixture
def mypyc(monkeypatch: pytest.MonkeyPatch) -> FakeMypyc:
    fake = FakeMypyc()
    monkeypatch.setattr(compiling, "_mypyc", fake)
    return fake


def _build(package: Path, builds: Path) -> Path:
    return compiling.build(package, builds, ("kvnode.node.hot",))


def test_a_build_is_the_package_with_its_hot_modules_compiled(tmp_path: Path, mypyc: FakeMypyc) -> None:
    package, builds = _package(tmp_path), tmp_path / "builds"
    build = _build(package, builds)
    assert build == builds / hot_path.sources_digest(package)
    assert mypyc.runs == [["kvnode/node/hot.py"]]
    assert (build / "kvnode" / "node" / "hot.py").read_text() == (package / "node" / "hot.py").read_text()
    assert (build / "kvnode" / "node" / "hot.cpython-311-x86_64-linux-gnu.so").is_file()
    assert not (build / "build").exists()  # the C sources are not kept
    assert json.loads((build / hot_path.STAMP).read_text())["modules"] == ["kvnode.node.hot"]
    assert sorted(path.name for path in builds.iterdir()) == [build.name]


def test_a_build_is_made_once_per_sources_and_only_the_newest_kept(tmp_path: Path, mypyc: FakeMypyc) -> None:
    package, builds = _package(tmp_path), tmp_path / "builds"
    first = _build(package, builds)
    assert _build(package, builds) == first
    assert len(mypyc.runs) == 1
    (package / "node" / "hot.py").write_text("def f() -> int:\n    return 2\n")
    second = _build(package, builds)
    assert second != first and len(mypyc.runs) == 2
    assert sorted(path.name for path in builds.iterdir()) == [second.name]


def test_a_failed_build_raises_and_leaves_nothing_to_use(tmp_path: Path, mypyc: FakeMypyc) -> None:
    package, builds = _package(tmp_path), tmp_path / "builds"
    mypyc.fails = True
    with pytest.raises(compiling.CompileFailed, match="gcc not found"):
        _build(package, builds)
    assert list(builds.iterdir()) == []


def test_an_abandoned_partial_build_is_removed_and_a_running_ones_kept(
    tmp_path: Path, mypyc: FakeMypyc
) -> None:
    package, builds = _package(tmp_path), tmp_path / "builds"
    abandoned = builds / "0123.partial-999999999"  # no such process
    running = builds / f"4567.partial-{os.getpid()}"
    abandoned.mkdir(parents=True)
    running.mkdir()
    build = _build(package, builds)
    assert sorted(path.name for path in builds.iterdir()) == sorted([build.name, running.name])


def test_the_command_says_when_there_is_nothing_to_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.prefix", str(tmp_path))
    build = hot_path.build_dir()
    build.mkdir(parents=True)
    (build / hot_path.STAMP).write_text("{}\n")
    assert compiling.main([]) == 0
    assert "built already" in capsys.readouterr().out


def test_the_command_fails_in_one_line_and_names_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mypyc: FakeMypyc, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.prefix", str(tmp_path))
    mypyc.fails = True
    assert compiling.main([]) == 1
    error = capsys.readouterr().err
    assert error == "compile: failed, nodes run the pure modules: error: gcc not found\n"


def test_a_partial_build_of_another_users_running_process_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mypyc: FakeMypyc
) -> None:
    package, builds = _package(tmp_path), tmp_path / "builds"
    theirs = builds / "89ab.partial-4242"
    theirs.mkdir(parents=True)

    def not_ours(pid: int, signal: int) -> None:
        raise PermissionError(f"process {pid} is another user's")

    monkeypatch.setattr(os, "kill", not_ours)
    build = _build(package, builds)
    assert sorted(path.name for path in builds.iterdir()) == sorted([build.name, theirs.name])
