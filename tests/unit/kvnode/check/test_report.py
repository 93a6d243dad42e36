"""report.md from a run's summary: the overall verdict first, each checker's verdict and counts and problems,
the faults with their windows and those skipped, the operations by outcome with latency percentiles, the
plots (or why there are none), and the command that runs the check again."""

from __future__ import annotations

from kvnode.check.nemesis import Fault
from kvnode.check.register import READ, WRITE
from kvnode.check.report import Summary, render
from kvnode.check.verdict import Verdict
from tests.histories import history, op

OPS = history(
    [
        op(0, WRITE, "k", "a", 0, 10),
        op(1, WRITE, "k", "b", 5, 1005, type="info"),
        op(2, READ, "k", None, 20, 23, result="a"),
        op(2, READ, "k", None, 30, 31, type="fail", result=None),
    ]
)


def summary(**changes: object) -> Summary:
    fields: dict[str, object] = {
        "command": "python -m kvnode check --local --seed 9",
        "seed": 9,
        "where": "a local cluster of 3 nodes, replication factor 3",
        "seconds": 60.0,
        "ops": OPS,
        "verdicts": [Verdict("register", False, {"reads": 1, "stale": 1}, ["stale read of k: op 4 ..."])],
        "faults": [Fault("kill", "http://n2", "kill -9", started=2_000_000_000, ended=4_500_000_000)],
        "skipped": ["partition skipped: they need root"],
        "plots": ["timeline.png", "latency.png"],
    }
    fields.update(changes)
    return Summary(**fields)  # type: ignore[arg-type]


def test_the_report_says_the_verdict_what_ran_and_how_to_run_it_again() -> None:
    report = render(summary())
    lines = report.splitlines()
    assert lines[0] == "# kvnode check: INVALID"
    checked = (
        "Checked a local cluster of 3 nodes, replication factor 3 for 60 s: 4 operations (2 ok, 1 failed,"
    )
    assert f"{checked} 1 of unknown outcome) and 1 fault." in lines
    assert "Run it again (seed 9): `python -m kvnode check --local --seed 9`" in lines
    assert "| register | invalid | reads 1, stale 1 |" in lines
    assert "- stale read of k: op 4 ..." in lines
    assert "| kill | http://n2 | 2.0 | 4.5 | kill -9 |" in lines
    assert "- partition skipped: they need root" in lines
    assert "| register-read | ok | 1 | 3.0 | 3.0 | 3.0 |" in lines
    assert "| register-write | info | 1 | 1000.0 | 1000.0 | 1000.0 |" in lines
    assert "![timeline.png](timeline.png)" in lines


def test_without_plots_the_report_says_why_and_a_valid_run_says_so() -> None:
    report = render(
        summary(
            verdicts=[Verdict("register", True, {"stale": 0})],
            faults=[],
            plots=[],
            plots_missing="no plots: X",
        )
    )
    assert report.startswith("# kvnode check: valid\n")
    assert "None injected." in report and "None drawn: no plots: X" in report
