"""tests/unit mirrors the packages module for module: a module's unit tests are in
tests/unit/<package path>/test_<module>.py, a package's own code (its __init__.py) in test_<package>.py
and its ``python -m`` entry (__main__.py) in test_main.py, so a module's tests are found by its name.
tests/process mirrors them the same way for the tests that need a process of the project (a node, a
command); a module whose every test needs one has its tests there only."""

from __future__ import annotations

from pathlib import Path

from tests.harness import REPO

UNIT = REPO / "tests" / "unit"
PROCESS = REPO / "tests" / "process"
PACKAGES = ("kvnode", "loadtest", "profiling")


def _mirror(module: Path, kind: Path = UNIT) -> Path:
    """Where the tests of ``module`` (a path under the repository) of that kind live."""
    folder = kind / module.parent
    if module.name == "__init__.py":
        return folder / f"test_{module.parent.name}.py"
    if module.name == "__main__.py":
        return folder / "test_main.py"
    return folder / f"test_{module.name}"


def test_every_kvnode_module_has_its_unit_tests_where_its_name_says() -> None:
    modules = [path.relative_to(REPO) for path in (REPO / "kvnode").rglob("*.py")]
    missing = [
        str(module)
        for module in modules
        if module.name not in ("__init__.py", "__main__.py")
        and not (_mirror(module).exists() or _mirror(module, PROCESS).exists())
    ]
    assert missing == []


def test_every_unit_and_process_test_file_is_named_for_a_module_it_mirrors() -> None:
    modules = [path.relative_to(REPO) for package in PACKAGES for path in (REPO / package).rglob("*.py")]
    mirrors = {_mirror(module, kind) for module in modules for kind in (UNIT, PROCESS)}
    tests = [*UNIT.rglob("test_*.py"), *PROCESS.rglob("test_*.py")]
    orphans = [str(path.relative_to(REPO)) for path in tests if path not in mirrors]
    assert orphans == []
