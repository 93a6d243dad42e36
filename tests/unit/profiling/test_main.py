"""``python -m profiling`` in this process: a run without the extras it needs refused in one line naming
the command that installs them; the runs compare plans. (Its runs end to end:
tests/process/profiling/test_main.py.)"""

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


def test_compare_profiles_the_cas_op_beside_put_and_get_without_a_saturation_phase() -> None:
    """wrk's closed loop sends one kind of request; a cas op's write is made of its read's answer."""
    from profiling.__main__ import _parser, _specs

    specs = _specs(_parser().parse_args(["compare", "--out", "unused"]))
    assert {(spec.scenario, spec.op, spec.mode) for spec in specs} == {
        (scenario, op, mode)
        for scenario in ("healthy", "slow-replica")
        for op in ("put", "get", "cas")
        for mode in ("async", "sync")
    }
    saturated = {(spec.op, spec.mode) for spec in specs if spec.saturation_duration}
    assert saturated == {(op, mode) for op in ("put", "get") for mode in ("async", "sync")}
    assert all(spec.scenario == "healthy" for spec in specs if spec.saturation_duration)
