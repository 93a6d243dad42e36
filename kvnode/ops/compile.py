"""``python -m kvnode.ops.compile`` (``make compiled``): compile the hot path (kvnode.hot_path.HOT_MODULES)
with mypyc into a build of these sources, which node processes started from then on use. About a minute
on 2 cores; nothing is built while a build of the same sources exists. Needs mypy (the ``compile`` extra)
and a C compiler; without them nodes run the pure modules, as they do until the build is done."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kvnode import hot_path

__all__ = ["CompileFailed", "build", "main"]

# mypyc type-checks what it compiles, and what that imports, with this configuration: the libraries
# without type hints (plyvel, hdrh) are taken as Any, as the project's own mypy settings do.
_MYPY_CONFIG = "[mypy]\nignore_missing_imports = True\n"


class CompileFailed(Exception):
    """mypyc could not build the hot path: the reason, in its own last words."""


def build(package: Path, builds: Path, modules: Sequence[str] = hot_path.HOT_MODULES) -> Path:
    """The build of ``package``'s sources under ``builds``: made unless it exists (a copy of the package,
    ``modules`` compiled in it, the stamp written last, then moved into place at once), and every other
    build removed. Raises CompileFailed."""
    target = builds / hot_path.sources_digest(package)
    if (target / hot_path.STAMP).is_file():
        return target
    work = builds / f"{target.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        shutil.copytree(package, work / package.name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        (work / "mypy.ini").write_text(_MYPY_CONFIG)
        _mypyc(work, [module.replace(".", "/") + ".py" for module in modules])
        shutil.rmtree(work / "build", ignore_errors=True)  # the C sources and objects: not used
        stamp = {
            "modules": list(modules),
            "python": sys.version,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (work / hot_path.STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        shutil.rmtree(target, ignore_errors=True)  # an unfinished one, without its stamp
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for other in builds.iterdir():
        if other != target and not _building(other):
            shutil.rmtree(other, ignore_errors=True)
    return target


def _building(path: Path) -> bool:
    """Whether ``path`` is a build still being made by a process that runs (a killed one leaves it)."""
    _, partial, pid = path.name.partition(".partial-")
    if not partial or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    return True


def _mypyc(work: Path, paths: Sequence[str]) -> None:
    """Compile ``paths`` (under ``work``) beside their sources. Raises CompileFailed."""
    command = [sys.executable, "-m", "mypyc", "--config-file", "mypy.ini", *paths]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines() or [f"exit status {done.returncode}"]
        raise CompileFailed(" / ".join(said[-3:]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvnode.ops.compile", description=__doc__)
    parser.parse_args(argv)
    target = hot_path.build_dir()
    if (target / hot_path.STAMP).is_file():
        print(f"compile: the hot path of these sources is built already ({target})")
        return 0
    count = len(hot_path.HOT_MODULES)
    print(f"compile: {count} modules of the hot path with mypyc into {target} (about a minute on 2 cores)")
    started = time.monotonic()
    try:
        build(hot_path.package_dir(), hot_path.builds_dir())
    except (CompileFailed, OSError) as error:
        print(f"compile: failed, nodes run the pure modules: {error}", file=sys.stderr)
        return 1
    print(f"compile: done in {time.monotonic() - started:.0f} s; nodes started from now on run it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
