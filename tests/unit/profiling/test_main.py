"""``python -m profiling`` in this process: a run without the extras it needs refused in one line naming
the command that installs them. (Its runs end to end: tests/process/profiling/test_main.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def test_a_run_without_the_extras_is_refused_in_one_line_naming_the_command_that_installs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As after `make run` (neither extra): in this process, before py-spy or a cluster is looked for."""
    from profiling.__main__ import main

    monkeypatch.setitem(sys.modules, "memray", None)
    assert main(["compare", "--quick", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "profiling: python -m profiling compare needs the load and profile extras (memray is not installed): "
        "install them with `make profile-tools` (that is, .venv/bin/pip install -e '.[load,profile]')\n"
    )
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["report", "--out", str(tmp_path)]) == 2  # a report draws plots: the load extra
    assert (
        "python -m profiling report needs the load extra (matplotlib is not installed)"
        in capsys.readouterr().err
    )
    assert list(tmp_path.iterdir()) == []
