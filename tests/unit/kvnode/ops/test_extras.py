"""kvnode.ops.extras: a command that needs an extra not installed is refused in one line naming the command
that installs it; the table agrees with pyproject.toml's extras and the Makefile's targets."""

from __future__ import annotations

import re
import tomllib

from kvnode.ops.extras import EXTRAS, install_command, needs
from tests.harness import REPO


def test_a_missing_extra_is_one_line_naming_what_is_missing_and_the_command_that_installs_it() -> None:
    nothing = needs("python -m profiling compare", ["load", "profile"], installed=lambda module: False)
    assert nothing == (
        "python -m profiling compare needs the load and profile extras (locust, matplotlib and memray are "
        "not installed): install them with `make profile-tools` (that is, .venv/bin/pip install -e "
        "'.[load,profile]')"
    )
    one = needs("python -m loadtest ui", ["load"], installed=lambda module: module != "locust")
    assert one == (
        "python -m loadtest ui needs the load extra (locust is not installed): install it with "
        "`make load-tools` (that is, .venv/bin/pip install -e '.[load]')"
    )
    assert needs("python -m loadtest ui", ["load"], installed=lambda module: True) == ""


def test_the_table_agrees_with_pyproject_and_the_makefile() -> None:
    """Each extra's modules are what pyproject.toml's extra requires (the profiler's target adds the load
    tools it runs), and each make target installs what its pip command says, never the dev extra."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    makefile = (REPO / "Makefile").read_text()
    for extra, (modules, target, pip) in EXTRAS.items():
        required = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in extras[extra]}
        assert set(modules) == required, extra
        stamp = re.search(rf"^{target}: \$\((\w+)\)$", makefile, re.MULTILINE)
        assert stamp is not None, target
        recipe = re.search(rf"^\$\({stamp[1]}\): .*\n\t\$\(PY\) -m (pip install -e '[^']+')", makefile, re.M)
        assert recipe is not None and pip.endswith(recipe[1]), (target, recipe)
    assert install_command("load") == "`make load-tools` (that is, .venv/bin/pip install -e '.[load]')"
