"""kvnode.hot_path: a build is used only for exactly its sources, never once KVNODE_PURE is set or a hot
module is already imported, and what a process runs is said as it is."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

import kvnode
from kvnode import hot_path


def _package(root: Path) -> Path:
    package = root / "pkg"
    (package / "sub" / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "mod.py").write_text("X = 1\n")
    return package


def test_the_digest_changes_with_any_source_and_only_with_a_source(tmp_path: Path) -> None:
    package = _package(tmp_path)
    first = hot_path.sources_digest(package)
    assert hot_path.sources_digest(package) == first
    (package / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"stale")
    (package / "notes.txt").write_text("not a source")
    assert hot_path.sources_digest(package) == first
    (package / "sub" / "mod.py").write_text("X = 2\n")
    assert hot_path.sources_digest(package) != first
    (package / "sub" / "mod.py").write_text("X = 1\n")
    assert hot_path.sources_digest(package) == first
    (package / "sub" / "mod.py").rename(package / "mod.py")  # the same bytes elsewhere: other sources
    assert hot_path.sources_digest(package) != first


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A process that has imported no hot module (one that does not exist stands in for them), whose
    builds are under tmp_path, with sys.path and kvnode's path restored after the test."""
    monkeypatch.setattr(hot_path, "HOT_MODULES", ("kvnode.not_imported_hot_module",))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(kvnode, "__path__", list(kvnode.__path__))
    monkeypatch.delenv(hot_path.PURE_ENV, raising=False)
    return tmp_path


def _finished_build() -> Path:
    build = hot_path.build_dir()
    (build / "kvnode").mkdir(parents=True)
    (build / hot_path.STAMP).write_text("{}\n")
    return build


def test_a_finished_build_of_these_sources_is_found_first(fresh_process: Path) -> None:
    build = _finished_build()
    assert build.parent == fresh_process / "kvnode-compiled"
    assert hot_path.planned()
    assert hot_path.activate() == build
    assert sys.path[0] == str(build)
    assert kvnode.__path__[0] == str(build / "kvnode")


def test_no_build_an_unfinished_one_or_another_sources_build_is_not_used(fresh_process: Path) -> None:
    path_before = list(kvnode.__path__)
    assert hot_path.activate() is None
    other = fresh_process / "kvnode-compiled" / "0123456789abcdef0123"  # another version's sources
    (other / "kvnode").mkdir(parents=True)
    (other / hot_path.STAMP).write_text("{}\n")
    assert hot_path.activate() is None
    (hot_path.build_dir() / "kvnode").mkdir(parents=True)  # no stamp: still being built
    assert hot_path.activate() is None
    assert kvnode.__path__ == path_before


def test_kvnode_pure_keeps_the_pure_modules(fresh_process: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _finished_build()
    monkeypatch.setenv(hot_path.PURE_ENV, "1")
    assert not hot_path.planned()
    assert hot_path.activate() is None
    monkeypatch.setenv(hot_path.PURE_ENV, "0")
    assert hot_path.planned()


def test_a_process_that_imported_a_hot_module_stays_pure(
    fresh_process: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _finished_build()
    monkeypatch.setitem(sys.modules, "kvnode.not_imported_hot_module", types.ModuleType("hot"))
    assert hot_path.activate() is None  # half compiled and half pure would be no build's hot path


def test_describe_counts_the_compiled_modules_this_process_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled, pure = types.ModuleType("a"), types.ModuleType("b")
    compiled.__file__ = "/x/kvnode/a.cpython-311-x86_64-linux-gnu.so"
    pure.__file__ = "/x/kvnode/b.py"
    monkeypatch.setattr(hot_path, "HOT_MODULES", ("kvnode.a", "kvnode.b", "kvnode.c"))
    monkeypatch.setitem(sys.modules, "kvnode.a", compiled)
    monkeypatch.setitem(sys.modules, "kvnode.b", pure)
    assert hot_path.describe() == "hot path compiled by mypyc (1 of 3 modules)"
    monkeypatch.delitem(sys.modules, "kvnode.a")
    monkeypatch.setenv(hot_path.PURE_ENV, "1")
    assert hot_path.describe() == "hot path pure Python (KVNODE_PURE set)"
    monkeypatch.delenv(hot_path.PURE_ENV)
    assert hot_path.describe() == "hot path pure Python (make compiled builds it)"


def test_every_hot_module_is_a_module_of_the_package() -> None:
    package = hot_path.package_dir()
    for name in hot_path.HOT_MODULES:
        assert (package.parent / (name.replace(".", "/") + ".py")).is_file(), name
