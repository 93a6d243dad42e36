"""The plots: three PNG files from a history with fault windows; without matplotlib, none, and the one line
that says how to install it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvnode.check import plots
from kvnode.check.nemesis import Fault
from kvnode.check.register import READ, WRITE
from tests.histories import history, op

OPS = history(
    [
        op(0, WRITE, "k", "a", 0, 10),
        op(1, WRITE, "k", "b", 5, 1005, type="info"),
        op(2, READ, "k", None, 20, 23, result="a"),
        op(2, READ, "k", None, 30, 31, type="fail", result=None),
    ]
)
FAULTS = [
    Fault("kill", "http://n2", "kill -9", started=5_000_000, ended=600_000_000),
    Fault("pause", "n", "", started=7),  # never ended: a sliver
]


def test_three_plots_are_drawn(tmp_path: Path) -> None:
    drawn = plots.draw(OPS, FAULTS, tmp_path)
    assert [path.name for path in drawn] == ["timeline.png", "latency.png", "latency-by-outcome.png"]
    for path in drawn:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_none_is_drawn_and_the_install_command_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(plots.PlotsUnavailable) as raised:
        plots.draw(OPS, FAULTS, tmp_path)
    assert str(raised.value) == (
        "no plots: matplotlib is not installed (to draw them: `make load-tools` (that is, .venv/bin/pip "
        "install -e '.[load]'))"
    )
    assert list(tmp_path.iterdir()) == []
