"""The project's optional extras (pyproject.toml): ``load`` (Locust, matplotlib: the load tools, their
reports and the check's plots) and ``profile`` (memray, beside the load tools: the profiler). ``make run``
installs neither, so a tool that needs one asks first, and a missing one is refused in one line naming the
command that installs it, before any work is done (not a ModuleNotFoundError minutes later).

>>> line = needs("python -m loadtest compare", ["load"], installed=lambda module: module != "matplotlib")
>>> print(line.replace(": ", ":\\n"))
python -m loadtest compare needs the load extra (matplotlib is not installed):
install it with `make load-tools` (that is, .venv/bin/pip install -e '.[load]')
>>> needs("python -m loadtest rate", [], installed=lambda module: False)
''
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

__all__ = ["EXTRAS", "install_command", "needs"]

# Each extra's modules, the make target that installs it and what that target runs; each target installs
# the extras before its own too (the profiler runs the load tools), so the last extra a command needs
# names the one command that installs them all.
EXTRAS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "load": (("locust", "matplotlib"), "load-tools", ".venv/bin/pip install -e '.[load]'"),
    "profile": (("memray",), "profile-tools", ".venv/bin/pip install -e '.[load,profile]'"),
}


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def install_command(extra: str) -> str:
    """How to install ``extra`` (and those before it): its make target, and the pip command it runs."""
    _, target, pip = EXTRAS[extra]
    return f"`make {target}` (that is, {pip})"


def needs(command: str, extras: Sequence[str], installed: Callable[[str], bool] = _importable) -> str:
    """The one line refusing ``command``, which needs ``extras`` (in EXTRAS' order), when a module of them
    is not installed; "" when every one is."""
    lacking = [module for extra in extras for module in EXTRAS[extra][0] if not installed(module)]
    if not lacking:
        return ""
    several = len(extras) > 1
    return (
        f"{command} needs the {_listed(extras)} extra{'s' if several else ''} ({_listed(lacking)} "
        f"{'are' if len(lacking) > 1 else 'is'} not installed): install {'them' if several else 'it'} with "
        f"{install_command(extras[-1])}"
    )


def _listed(names: Sequence[str]) -> str:
    """a, b and c."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
